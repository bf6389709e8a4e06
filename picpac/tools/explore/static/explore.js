// picpac explore: the augmentation page's controls. The explorer serves this file itself; its
// Content-Security-Policy runs no other script (none inline, none from another host).
//
// A control sends its edit (a JSON object of keys to values) with the page's config text to
// /augment.json; the server makes the edit in the text, runs it and answers the new text, the
// controls' values, the fold links and the samples, which replace the page's. Without this
// script the page still works: its form runs the text, the re-roll button and the fold links too.
"use strict";

(function () {
  const form = document.getElementById("augment-form");
  if (!form) {
    return;
  }
  const config = document.getElementById("config");
  const samples = document.getElementById("samples");
  const status = document.getElementById("status");
  const draw = document.getElementById("draw");
  const folds = document.getElementById("folds");
  const controls = Array.from(form.querySelectorAll("[data-key]"));
  const PAUSE_MS = 250; // a slider's edits within this pause go in one run
  let edits = {}; // a slider's edits waiting for its pause
  let unapplied = {}; // edits sent whose answer has not come: the next run sends them again
  let timer = null;
  let running = null;

  function valueOf(input) {
    if (input.type === "checkbox") {
      return input.checked;
    }
    if (input.type === "range" || input.type === "number") {
      return Number(input.value);
    }
    return input.value === "" ? null : input.value;
  }

  function showValue(input) {
    const shown = document.getElementById("v-" + input.dataset.key);
    if (shown) {
      shown.textContent = input.value;
    }
  }

  function setControls(values) {
    for (const input of controls) {
      const value = values[input.dataset.key];
      if (value === undefined) {
        continue;
      }
      if (input.type === "checkbox") {
        input.checked = Boolean(value);
      } else {
        input.value = String(value);
      }
      showValue(input);
    }
  }

  function showError(message) {
    let box = document.getElementById("error");
    if (message === null || message === undefined) {
      if (box) {
        box.remove();
      }
      return;
    }
    if (!box) {
      box = document.createElement("div");
      box.id = "error";
      box.className = "error";
      document.querySelector("main").prepend(box);
    }
    box.textContent = message;
  }

  function pictureOf(digest, k) {
    return "/augment/" + digest + "/" + k + (draw.checked ? "-drawn" : "") + ".png";
  }

  function address(text, extra) {
    return "/augment?" + new URLSearchParams({config: text, ...extra, draw: draw.checked ? "1" : "0"});
  }

  function showSamples(digest, list) {
    const cells = list.map(function (s) {
      const cell = document.createElement("div");
      cell.className = "cell";
      const link = document.createElement("a");
      link.className = "exact";
      link.href = "/augment/" + digest + "/" + s.k + ".png";
      const img = document.createElement("img");
      img.src = pictureOf(digest, s.k);
      img.alt = "sample " + s.k;
      img.dataset.k = s.k;
      link.append(img);
      cell.append(link, "sample " + s.k, document.createElement("br"), "label " + s.label);
      if (s.shapes) {
        const shapes = document.createElement("span");
        shapes.className = "shapes";
        shapes.textContent = s.shapes;
        cell.append(document.createElement("br"), shapes);
      }
      return cell;
    });
    samples.replaceChildren(...cells);
    samples.dataset.digest = digest;
  }

  function showFolds(text, links) {
    folds.replaceChildren(...links.flatMap(function (f) {
      const link = document.createElement("a");
      link.href = address(text, {set: JSON.stringify(f.edit)});
      link.dataset.set = JSON.stringify(f.edit);
      link.textContent = f.text;
      if (f.on) {
        link.className = "on";
      }
      return [link, " "];
    }));
  }

  function show(reply) {
    config.value = reply.config;
    setControls(reply.values);
    showFolds(reply.config, reply.folds);
    showError(reply.error);
    showSamples(reply.digest, reply.samples);
    history.replaceState(null, "", address(reply.config, {}));
    status.textContent = reply.error === null ? reply.samples.length + " samples" : "";
  }

  function run(more, reroll) {
    if (running) {
      running.abort(); // the server stops a run whose client went away
    }
    unapplied = {...unapplied, ...more};
    const query = {config: config.value};
    if (Object.keys(unapplied).length > 0) {
      query.set = JSON.stringify(unapplied);
    }
    if (reroll) {
      query.reroll = "1";
    }
    const mine = new AbortController();
    running = mine;
    status.textContent = "running ...";
    fetch("/augment.json?" + new URLSearchParams(query), {signal: mine.signal})
      .then(function (response) {
        return response.json();
      })
      .then(function (reply) {
        if (running === mine) {
          running = null;
          unapplied = {};
          show(reply);
        }
      })
      .catch(function (error) {
        if (error.name !== "AbortError") {
          status.textContent = "";
          showError("the explorer did not answer: " + error.message);
        }
      });
  }

  function edited(input) {
    edits[input.dataset.key] = valueOf(input);
    showValue(input);
    clearTimeout(timer);
    timer = setTimeout(function () {
      const more = edits;
      edits = {};
      run(more, false);
    }, PAUSE_MS);
  }

  for (const input of controls) {
    input.addEventListener(input.type === "range" ? "input" : "change", function () {
      edited(input);
    });
  }
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    run({}, Boolean(event.submitter && event.submitter.id === "reroll"));
  });
  folds.addEventListener("click", function (event) {
    const link = event.target.closest("a[data-set]");
    if (link) {
      event.preventDefault();
      run(JSON.parse(link.dataset.set), false);
    }
  });
  draw.addEventListener("change", function () {
    for (const img of samples.querySelectorAll("img")) {
      img.src = pictureOf(samples.dataset.digest, img.dataset.k);
    }
    history.replaceState(null, "", address(config.value, {}));
  });
})();
