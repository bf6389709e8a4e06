"""`picpac import -f` and `picpac-import -f` share one vocabulary (PicPac's numbers and the names, one
table: picpac.sources.base.PICPAC_NUMBERS), the same options, and messages that name options the
command that printed them accepts. Real subprocesses on real ImageNet images copied to a temp dir."""
from __future__ import annotations

import shutil

import pytest

import picpac
from picpac.sources.base import FORMATS, PICPAC_NUMBERS, format_name

from helpers import run_console

COMMANDS = [("picpac", "import"), ("picpac-import",)]
IDS = ["picpac import", "picpac-import"]


@pytest.fixture
def images(shared_data, tmp_path):
    """Four ImageNet JPEGs in tmp_path/flat, and the same in class folders tmp_path/classes/0, 1."""
    rows = [line.split("\t") for line in (shared_data / "imagenet-250" / "labels.tsv").read_text().splitlines()[1:5]]
    (tmp_path / "flat").mkdir()
    for i, (name, _, _) in enumerate(rows):
        shutil.copy(shared_data / "imagenet-250" / name, tmp_path / "flat" / name)
        (tmp_path / "classes" / str(i % 2)).mkdir(parents=True, exist_ok=True)
        shutil.copy(shared_data / "imagenet-250" / name, tmp_path / "classes" / str(i % 2) / name)
    return tmp_path, [(name, class_name) for name, _, class_name in rows]


def test_one_table():
    assert PICPAC_NUMBERS == {"0": "dir", "1": "list", "2": "classdirs", "3": "annolist", "4": "masklist"}
    for number, name in PICPAC_NUMBERS.items():
        assert format_name(number) == format_name(int(number)) == format_name(name) == name
    assert [format_name(name) for name in FORMATS] == list(FORMATS)


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
@pytest.mark.parametrize("fmt", ["2", "classdirs"])
def test_numbers_and_names_import_the_same(images, command, fmt):
    tmp, rows = images
    done = run_console(*command, "-f", fmt, "classes", "db.picpac", cwd=tmp)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported 4 records from classdirs {tmp / 'classes'} into db.picpac (")
    with picpac.Reader(tmp / "db.picpac") as db:
        assert sorted(r.label for r in db) == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_yolo_options_on_both(images, command):
    tmp, _ = images
    (tmp / "labels").mkdir()
    (tmp / "flat" / "x.txt").write_text("")
    first = sorted((tmp / "flat").glob("*.JPEG"))[0]
    (tmp / "labels" / f"{first.stem}.txt").write_text("1 0.5 0.5 0.2 0.4\n")
    (tmp / "names.txt").write_text("cat\ndog\n")
    done = run_console(*command, "-f", "yolo", "flat", "db.picpac", "--labels", "labels", "--classes", "names.txt", cwd=tmp)
    assert done.returncode == 0, done.stderr
    with picpac.Reader(tmp / "db.picpac") as db:
        assert db.classes == ["cat", "dog"] and len(db) == 4


@pytest.mark.parametrize("command, prog", [(("picpac", "import"), "picpac"), (("picpac-import",), "picpac-import")],
                         ids=IDS)
@pytest.mark.parametrize("args, message", [
    (("-f", "0", "list.txt"), "error: list.txt: is a file, but format 'dir' reads a folder; "
                              "use -f list/annolist/masklist/csv/coco or -f auto for list files"),
    (("-f", "list", "flat"), "error: flat: is a directory, but format 'list' reads a list file; "
                             "use -f dir/classdirs/imagefolder/yolo/yolo-seg/maskdir or -f auto for folders"),
    (("-f", "dir", "flat", "--classes", "names.txt"),
     "error: classes (--classes) applies to the formats yolo, yolo-seg, maskdir, not to 'dir'; "
     "leave it out, or name one of those formats with -f"),
    (("-f", "dir", "flat", "--root", "flat"),
     "error: flat: root (--root) applies to list, CSV and COCO sources, not to folders; leave it out"),
    (("-f", "maskdir", "flat"),
     "error: flat: format maskdir needs the folder of masks; pass it as labels (--labels DIR)"),
    (("-f", "dir", "empty"), "error: empty: no images found (dir {tmp}/empty); see `picpac docs import` for the layouts"),
    (("-f", "dir", "flat", "--from", "lmdb"), None),
])
def test_errors_name_options_the_command_accepts(images, command, prog, args, message):
    tmp, _ = images
    (tmp / "list.txt").write_text("a.jpg\t1\n")
    (tmp / "names.txt").write_text("cat\n")
    (tmp / "empty").mkdir()
    src = args[2]
    done = run_console(*command, *args[:2], src, "db.picpac", *args[3:], cwd=tmp)
    assert done.returncode == 2
    if message is None:  # a usage error of click: one line too, naming the command's help
        assert done.stderr == (f"{prog}: error: --from cannot be combined with -f/--format (they apply to image "
                               f"layouts); `{' '.join(command)} --help` lists the options\n")
        return
    assert done.stderr == f"{prog}: {message.format(tmp=tmp)}\n"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_both_accept_every_option_the_shared_messages_suggest(tmp_path, command):
    helptext = run_console(*command, "--help", cwd=tmp_path).stdout
    for option in ("-f, --format FORMAT|N", "--from", "--labels", "--classes", "--root", "--overwrite", "--strict",
                   "--max-pixels", "--max-size", "--threads"):
        assert f"  {option} " in helptext, option
    assert "PicPac's number of one: 0 dir, 1 list, 2 classdirs, 3 annolist, 4 masklist" in " ".join(helptext.split())


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
@pytest.mark.parametrize("value, message", [
    ("5", "format 5 (re-encoding a PicPac database) is not supported: import the images themselves, with "
          "--max-size to shrink them; `picpac import --from FORMAT` converts a dataset in another storage format"),
    ("6", "format 6 (ImageNet tar files) is not supported: unpack the tar files into one folder per class and "
          "import that folder with -f imagefolder"),
    ("pictures", "unknown import format 'pictures'; use one of auto, dir, list, classdirs, imagefolder, annolist, "
                 "masklist, csv, coco, yolo, yolo-seg, maskdir, or PicPac's numbers 0 (dir), 1 (list), "
                 "2 (classdirs), 3 (annolist), 4 (masklist)"),
])
def test_unknown_formats(images, command, value, message):
    tmp, _ = images
    done = run_console(*command, "-f", value, "flat", "db.picpac", cwd=tmp)
    assert done.returncode == 2
    assert done.stderr == f"{command[0]}: error: Invalid value for '-f' / '--format': {message}; " \
                          f"`{' '.join(command)} --help` lists the options\n"
    assert not (tmp / "db.picpac").exists()


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
@pytest.mark.parametrize("separator", ["\t", " ", "   "])
def test_a_list_of_class_names_is_a_classification_list_never_a_mask_list(images, command, separator):
    tmp, rows = images
    (tmp / "flat" / "train.txt").write_text("".join(f"{name}{separator}{class_name}\n" for name, class_name in rows))
    fmt = ("-f", "auto") if command == ("picpac-import",) else ()  # picpac-import's default is 1, list
    done = run_console(*command, *fmt, "flat/train.txt", "db.picpac", cwd=tmp)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported 4 records from list {tmp / 'flat' / 'train.txt'} into db.picpac (")
    names = sorted({class_name for _, class_name in rows})
    with picpac.Reader(tmp / "db.picpac") as db:
        assert db.classes == names and db.fields == ["image"]
        assert [(r.meta["path"], r.label) for r in db] == [(name, names.index(c)) for name, c in rows]


def test_a_list_of_existing_mask_files_is_a_mask_list(images):
    tmp, rows = images
    # a mask named without an image extension is still a mask when the file exists
    shutil.copy(tmp / "flat" / rows[0][0], tmp / "flat" / "mask0")
    (tmp / "flat" / "masks.txt").write_text(f"{rows[0][0]} mask0\n")
    done = run_console("picpac", "import", "flat/masks.txt", "db.picpac", cwd=tmp)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported 1 records from masklist {tmp / 'flat' / 'masks.txt'} into db.picpac (")


@pytest.mark.parametrize("option, replacement", [
    (["--max", "256"], "--max 256 is not supported: PicPac's --max N shrank each image so that its shorter side was "
                       "at most N; picpac keeps the images as they are and sizes them when it streams them "
                       "(resize_shorter=N)"),
    (["--resize", "224"], "resize_width=N, resize_height=N"),
    (["--encode", ".jpg"], "picpac downsize DB OUT --max-size N [--quality Q]"),
    (["--compact"], "picpac never pads records, so leave it out"),
])
def test_picpacs_import_options_are_refused_with_what_to_run_instead(images, tmp_path, option, replacement):
    src, _ = images
    out = run_console("picpac-import", "-f", "0", *option, str(src / "flat"), str(tmp_path / "x.picpac"), cwd=tmp_path)
    assert out.returncode == 2 and replacement in " ".join(out.stderr.split()) and not (tmp_path / "x.picpac").exists()
    shown = run_console("picpac-import", "--help", cwd=tmp_path).stdout.split()
    assert option[0] not in shown  # hidden: not picpac's own
