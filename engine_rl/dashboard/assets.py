"""The JS/CSS/font files visdom's page needs, installed once from npm packages.

visdom 0.2.4 ships without them: ``python -m visdom.server`` downloads them from CDNs at every
start and crashes offline. They are all files of npm packages, so :func:`install_assets` takes
them from the npm registry (``npm pack NAME@VERSION``, then extracts the files it needs) into
visdom's ``static/`` folder and writes ``static/version.built``. After that, neither our server
nor visdom's own start-up downloads anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ASSETS", "VISDOM_VERSION", "Asset", "install_assets", "missing_assets", "visdom_static_dir"]

#: The visdom release these assets belong to (``static/version.built`` must hold it).
VISDOM_VERSION = "0.2.4"

_GLYPH = "glyphicons-halflings-regular"
_MATHJAX = (
    "MathJax.js", "config/Safe.js", "config/TeX-AMS-MML_HTMLorMML.js", "extensions/Safe.js",
    "jax/output/SVG/config.js", "jax/output/SVG/jax.js", "jax/output/SVG/fonts/TeX/fontdata.js",
    "jax/output/SVG/fonts/TeX/Size1/Regular/Main.js",
)


@dataclass(frozen=True)
class Asset:
    """One npm package and the files taken from it: ``(path in the package, path under static/)``."""

    spec: str
    files: tuple[tuple[str, str], ...]


#: What visdom's ``build.py::download_scripts`` fetches, as npm packages.
ASSETS: tuple[Asset, ...] = (
    Asset("jquery@3.1.1", (("dist/jquery.min.js", "js/jquery.min.js"),)),
    Asset("bootstrap@3.3.7", (
        ("dist/js/bootstrap.min.js", "js/bootstrap.min.js"),
        ("dist/css/bootstrap.min.css", "css/bootstrap.min.css"),
        *((f"dist/fonts/{_GLYPH}.{ext}", f"fonts/{_GLYPH}.{ext}") for ext in ("eot", "woff2", "woff", "ttf", "svg")),
        # visdom names the svg with its fragment, literally
        (f"dist/fonts/{_GLYPH}.svg", f"fonts/{_GLYPH}.svg#glyphicons_halflingsregular"),
    )),
    Asset("react@16.2.0", (("umd/react.production.min.js", "js/react-react.min.js"),)),
    Asset("react-dom@16.2.0", (("umd/react-dom.production.min.js", "js/react-dom.min.js"),)),
    Asset("react-modal@3.1.10", (("dist/react-modal.min.js", "js/react-modal.min.js"),)),
    Asset("plotly.js-dist-min@2.11.1", (("plotly.min.js", "js/plotly-plotly.min.js"),)),
    Asset("sjcl@1.0.7", (("sjcl.js", "js/sjcl.js"),)),
    Asset("layout-bin-packer@1.4.0", (
        ("dist/layout-bin-packer.js", "js/layout_bin_packer.js"),
        ("dist/layout-bin-packer.js.map", "js/layout-bin-packer.js.map"),
    )),
    Asset("d3@3.5.17", (("d3.min.js", "js/d3.v3.min.js"),)),
    Asset("d3-selection-multi@1.0.1", (("build/d3-selection-multi.js", "js/d3-selection-multi.v1.js"),)),
    Asset("save-svg-as-png@1.4.17", (("lib/saveSvgAsPng.js", "js/saveSvgAsPng.js"),)),
    Asset("react-resizable@1.4.6", (("css/styles.css", "css/react-resizable-styles.css"),)),
    Asset("react-grid-layout@0.16.3", (("css/styles.css", "css/react-grid-layout-styles.css"),)),
    Asset("classnames@2.2.5", (("index.js", "fonts/classnames"),)),
    Asset("mathjax@2.7.5", tuple((f, f"js/mathjax/2.7.5/{f}") for f in _MATHJAX)),
)


#: Empty files visdom's page template asks tornado to hash (it logs an error on every page load
#: without them); the content is served by visdom's user-settings handler instead.
PLACEHOLDERS = ("../user/style.css",)


def visdom_static_dir() -> Path:
    """visdom's ``static/`` folder (found without importing visdom, which imports torch).

    Raises:
        ModuleNotFoundError: visdom is not installed.
    """
    spec = importlib.util.find_spec("visdom")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "dashboard: the visdom package is missing; install the extra with "
            "`PIP_CONSTRAINT=<file containing 'setuptools<81'> pip install \"engine_rl[visdom]\"`"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "static"


def missing_assets(static_dir: str | os.PathLike | None = None) -> list[str]:
    """Files under ``static_dir`` (default: visdom's) still missing, ``version.built`` included.

    Examples:
        >>> import tempfile
        >>> missing = missing_assets(tempfile.mkdtemp() + "/static")  # "../user" inside the temp dir too
        >>> len(missing), missing[0], missing[-1]
        (32, 'js/jquery.min.js', 'version.built')
    """
    root = Path(static_dir) if static_dir is not None else visdom_static_dir()
    missing = [dst for asset in ASSETS for _, dst in asset.files if not (root / dst).is_file()]
    missing += [p for p in PLACEHOLDERS if not (root / p).is_file()]
    built = root / "version.built"
    if not built.is_file() or built.read_text().strip() != VISDOM_VERSION:
        missing.append("version.built")
    return missing


def _pack(specs: list[str], dest: Path, npm: str) -> dict[str, Path]:
    """``npm pack`` each spec into ``dest``; spec -> tarball path."""
    exe = shutil.which(npm)
    if exe is None:
        raise RuntimeError(
            f"dashboard: cannot install visdom's page assets: {npm!r} (the npm client) was not found; "
            "install Node.js/npm (Debian: apt-get install npm) and run `engine-rl dashboard --install-assets`"
        )
    proc = subprocess.run([exe, "pack", "--json", *specs], cwd=dest, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"dashboard: `npm pack {' '.join(specs)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    try:
        packed = json.loads(proc.stdout)
        files = [dest / entry["filename"] for entry in packed]
    except (ValueError, KeyError, TypeError) as err:
        raise RuntimeError(f"dashboard: unexpected output from `npm pack --json`: {proc.stdout[:500]!r}") from err
    if len(files) != len(specs):
        raise RuntimeError(f"dashboard: `npm pack` returned {len(files)} tarballs for {len(specs)} packages")
    return dict(zip(specs, files))


def _extract(tarball: Path, asset: Asset, root: Path) -> None:
    with tarfile.open(tarball, "r:gz") as tar:
        members = {}
        for member in tar.getmembers():
            if member.isfile():
                # npm tarballs hold one top folder (usually "package/"); drop it
                members[member.name.split("/", 1)[-1]] = member
        for src, dst in asset.files:
            if src not in members:
                raise RuntimeError(f"dashboard: {asset.spec} has no file {src!r} (from {tarball.name})")
            target = root / dst
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(members[src])
            assert data is not None
            tmp = target.with_name(target.name + ".part")
            tmp.write_bytes(data.read())
            os.replace(tmp, target)


def install_assets(
    static_dir: str | os.PathLike | None = None, *, npm: str = "npm", force: bool = False
) -> list[str]:
    """Put visdom's page assets into ``static_dir`` (default: visdom's) from npm packages.

    Only packages with a missing file are fetched (all with ``force``); ``version.built`` is
    written last, so visdom's own start-up does not download either. Needs the ``npm`` client
    and the npm registry (nothing else) once; serving needs neither afterwards.

    Args:
        static_dir: the ``static/`` folder to fill.
        npm: the npm executable.
        force: re-install every file.

    Returns:
        The files written (paths under ``static_dir``); empty if nothing was missing.

    Raises:
        RuntimeError: npm is missing or failed, or a package lacks a file (the message says which).
    """
    root = Path(static_dir) if static_dir is not None else visdom_static_dir()
    missing = set(missing_assets(root))
    todo = [a for a in ASSETS if force or any(dst in missing for _, dst in a.files)]
    written: list[str] = []
    if todo:
        with tempfile.TemporaryDirectory(prefix="engine-rl-npm-") as tmp:
            tarballs = _pack([a.spec for a in todo], Path(tmp), npm)
            for asset in todo:
                _extract(tarballs[asset.spec], asset, root)
                written.extend(dst for _, dst in asset.files)
    for placeholder in PLACEHOLDERS:
        if placeholder in missing:
            (root / placeholder).parent.mkdir(parents=True, exist_ok=True)
            (root / placeholder).touch()
            written.append(placeholder)
    if force or "version.built" in missing:
        (root / "version.built").write_text(VISDOM_VERSION)
        written.append("version.built")
    return written
