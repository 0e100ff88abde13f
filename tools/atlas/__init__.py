"""The hook atlas: where to hook every model of the transformers, diffusers, timm and torchvision zoos. Its data
files are ``hooklab/course/assets/atlas/<zoo>.json``; ``generate`` measures the zoos and writes them
(``python -m tools.atlas``), ``zoos`` builds each model small, ``probe`` watches a step with plain PyTorch (the
truth the hook doctor is tested against), ``pages`` writes the data files, the site's pages and the difference
between two atlases; tests/tools/test_atlas_tools.py and tests/library/test_atlas.py check them. It imports
``hooklab``; the site and the re-run import its pages.
"""
