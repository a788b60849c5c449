"""A stand-in for the Hugging Face hub, on 127.0.0.1 (a test double: the real hub cannot be reached here).

It speaks only the parts of the hub API that huggingface_hub's
model_info/repo_info, list_repo_tree and hf_hub_download use: repo info by
revision, the recursive tree listing, and HEAD/GET on resolve URLs with the
headers the client reads (X-Repo-Commit, ETag, X-Linked-Etag, X-Linked-Size).
Files at or over LFS_MIN bytes are served as LFS files, whose ETag is their sha256.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_MIN = 1024


class FakeHub:
    def __init__(
        self,
        repos: dict[str, dict[str, bytes]],
        commit: str = "c" * 40,
        history: dict[str, dict[str, dict[str, bytes]]] | None = None,
    ) -> None:
        # repos: what each repository's main holds (at `commit`); history: older commits, repo -> commit -> files
        self.repos, self.commit, self.history = repos, commit, history or {}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, authorization)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, body=False)

            def do_GET(self) -> None:
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    @staticmethod
    def _git_oid(data: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's blob id

    def _entry(self, path: str, data: bytes) -> dict:
        entry = {"type": "file", "path": path, "size": len(data), "oid": self._git_oid(data)}
        if len(data) >= LFS_MIN:
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _send(self, handler: BaseHTTPRequestHandler, code: int, payload: bytes, headers: dict, body: bool) -> None:
        handler.send_response(code)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if body:
            handler.wfile.write(payload)

    def _serve(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        parts = urlsplit(handler.path)
        path = unquote(parts.path)
        self.requests.append((handler.command, path, handler.headers.get("Authorization")))
        for repo, files in self.repos.items():
            info = f"/api/models/{repo}/revision/"
            tree = f"/api/models/{repo}/tree/"
            resolve = f"/{repo}/resolve/"
            revision = next((path[len(p) :].split("/", 1)[0] for p in (info, tree, resolve) if path.startswith(p)), "")
            commit = revision if revision in self.history.get(repo, {}) else self.commit
            files = self.history.get(repo, {}).get(revision, files)
            js = {"Content-Type": "application/json", "X-Repo-Commit": commit}
            if path.startswith(info) or path == f"/api/models/{repo}":
                data = {
                    "id": repo,
                    "modelId": repo,
                    "sha": commit,
                    "private": False,
                    "siblings": [{"rfilename": name} for name in sorted(files)],
                }
                return self._send(handler, 200, json.dumps(data).encode(), js, body)
            if path.startswith(tree):
                listing = [self._entry(name, data) for name, data in sorted(files.items())]
                return self._send(handler, 200, json.dumps(listing).encode(), js, body)
            if path.startswith(resolve):
                name = path[len(resolve) :].split("/", 1)[1]
                if name not in files:
                    return self._send(handler, 404, b"not found", {"X-Error-Code": "EntryNotFound"}, body)
                data = files[name]
                entry = self._entry(name, data)
                headers = {
                    "X-Repo-Commit": commit,
                    "Content-Type": "application/octet-stream",
                    "ETag": f'"{entry["oid"]}"',
                }
                if "lfs" in entry:
                    headers["ETag"] = f'"{entry["lfs"]["oid"]}"'
                    headers["X-Linked-Etag"] = f'"{entry["lfs"]["oid"]}"'
                    headers["X-Linked-Size"] = str(len(data))
                return self._send(handler, 200, data, headers, body)
        self._send(handler, 404, b"no such repo", {"X-Error-Code": "RepoNotFound"}, body)
