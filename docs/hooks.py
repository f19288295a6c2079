"""mkdocs hook: the site's pages are the repository's Markdown files at their repository paths.

README.md, each trainer's README.md beside its code and docs/*.md are read from the repository
root instead of docs/, so that `docs/install.md` links to `../segmentation/README.md` as it does on
GitHub, and `mkdocs build --strict` checks the links a GitHub reader follows.
"""
import glob
import os

from mkdocs.structure.files import File


def on_files(files, config):
  root = os.path.dirname(config.config_file_path)
  for page in [f for f in files if f.is_documentation_page()]:
    files.remove(page)
  paths = ["README.md"] + sorted(glob.glob("*/README.md", root_dir=root)) + sorted(
      glob.glob("docs/*.md", root_dir=root))
  for path in paths:
    files.append(File(path, root, config.site_dir, config.use_directory_urls))
  return files
