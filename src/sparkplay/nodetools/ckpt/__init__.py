"""sparkplay-ckpt, the checkpoint tool the `checkpoint` role installs on every node.

Standard library only (`download` and `resolve` import huggingface_hub). The
modules: `common` (errors, atomic writes, hashing), `paths` (what a path from a
peer may be, and opening beneath a folder without following links),
`manifest` (rank 0's list of every file, and its digest), `state` (verify,
need, mark, status, prune on one rank), `protocol` (the frames both ends
speak), `sink` (the receiving end: trusts nothing), `transports/` (how bytes
cross: ssh, tcp, rsync), `sync` (rank 0 brings one peer to its manifest),
`hub` (Hugging Face), `cli`.
"""
