"""Engine adapters: a recipe plus the inventory's facts -> one launch plan per rank.

`plan.build(recipe, nodes, ...)` is the only entry point; each engine module
(atlas, vllm, llamacpp) adds exactly the per-rank pieces its engine needs
(docs/serving.md) and passes the recipe's own flags through
verbatim. sparkplay.deployment.with_launch (stage two of the Deployment) is its one caller.
"""
