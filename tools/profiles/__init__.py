"""The library profiles: what libraries do to a model's hooks (tools/profiles/), and the equivalents of a hook in other frameworks."""
