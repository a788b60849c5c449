"""Pasted text: an engine start found in a command line, a shell script (shell, shell_words), `docker run`
(docker_run), a compose file (compose) or a page's code blocks (page), each a Launch (launches) made a
RawRecipe (launch); llama.cpp's `-hf` repository files (gguf_hub)."""
