"""`turnformer serve`: trained models over HTTP, with a web page. `models` loads the command line's checkpoints,
`sessions` holds conversations between requests, `schemas` says what requests carry and the limits on them, `app`
builds the FastAPI app, `server` runs it with uvicorn, and `static/` is the page. The layer above the tasks, which it
reaches through their registry and interface only; below the command line."""
