"""`picpac explore DB`: a local, read-only web app over one database (docs/explore.md).

Pages: an overview (info's numbers, size and aspect-ratio distributions, fold counts), a thumbnail grid
filtered by label, fold and meta, a record page, and live augmentation through ImageStream, with controls (one
script, served by the app) and the annotations drawn. Starlette,
uvicorn and Jinja2 are imported only here (`pip install picpac[explore]`), never by `import picpac`."""
