"""The library profiles (tools/profiles/): what libraries do to a model's hooks, measured by running each one
(``spec``, ``probe``, ``measure``, ``generate``, ``libraries/``, ``page``: hooklab/course/assets/profiles/
library_profiles.json, which ``course.profile`` reads, and the site's pages), and the equivalents of a hook in other
frameworks (``frameworks``, ``frameworks_data``: docs/other_frameworks.json and the site's page). It may import
hooklab.course and tools/hook_matrix/ (the matrix cells a profile inherits)."""
