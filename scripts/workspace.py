"""What the repository's Python scripts share about the Cargo workspace."""

import os
import re


def workspace_sources(root):
    """The src/ directory of every member of the workspace at `root`
    (Cargo.toml's `members`), in its order."""
    with open(os.path.join(root, "Cargo.toml")) as f:
        text = f.read()
    m = re.search(r"^members\s*=\s*\[(.*?)\]", text, re.S | re.M)
    members = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    return [os.path.join(root, d, "src") for d in members
            if os.path.isdir(os.path.join(root, d, "src"))]
