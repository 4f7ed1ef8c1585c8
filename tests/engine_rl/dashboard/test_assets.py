import io
import json
import os
import sys
import tarfile
import textwrap

import pytest

from engine_rl.dashboard.assets import ASSETS, VISDOM_VERSION, install_assets, missing_assets


def _fake_npm(tmp_path, *, broken=None):
    """An ``npm`` whose ``pack --json SPEC...`` writes tarballs holding each asset's files."""
    table = {a.spec: [src for src, _ in a.files] for a in ASSETS}
    if broken:
        table[broken] = table[broken][1:]
    script = tmp_path / "npm"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import io, json, sys, tarfile
        table = {table!r}
        assert sys.argv[1:3] == ["pack", "--json"], sys.argv
        with open({str(tmp_path / "calls.log")!r}, "a") as log:
            log.write(" ".join(sys.argv[3:]) + "\\n")
        out = []
        for spec in sys.argv[3:]:
            name = spec.replace("@", "-") + ".tgz"
            with tarfile.open(name, "w:gz") as tar:
                for src in table[spec]:
                    data = f"{{spec}}:{{src}}".encode()
                    info = tarfile.TarInfo("package/" + src)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            out.append({{"id": spec, "filename": name}})
        print(json.dumps(out))
        """))
    script.chmod(0o755)
    return str(script)


def test_install_from_npm_tarballs_then_nothing_to_do(tmp_path):
    static = tmp_path / "static"
    npm = _fake_npm(tmp_path)
    written = install_assets(static, npm=npm)
    assert missing_assets(static) == []
    assert len(written) == sum(len(a.files) for a in ASSETS) + 2  # + the empty user style, version.built
    assert (tmp_path / "user" / "style.css").read_text() == ""
    assert (static / "js/plotly-plotly.min.js").read_text() == "plotly.js-dist-min@2.11.1:plotly.min.js"
    assert (static / "fonts/glyphicons-halflings-regular.svg#glyphicons_halflingsregular").read_text() == \
        "bootstrap@3.3.7:dist/fonts/glyphicons-halflings-regular.svg"
    assert (static / "fonts/classnames").read_text() == "classnames@2.2.5:index.js"
    assert (static / "js/mathjax/2.7.5/jax/output/SVG/fonts/TeX/Size1/Regular/Main.js").is_file()
    assert (static / "version.built").read_text() == VISDOM_VERSION
    assert install_assets(static, npm=npm) == []  # all there: npm not called again
    (static / "js/d3.v3.min.js").unlink()
    assert missing_assets(static) == ["js/d3.v3.min.js"]
    assert install_assets(static, npm=npm) == ["js/d3.v3.min.js"]  # only the package that lacks a file
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == 2 and calls[1] == "d3@3.5.17"


def test_a_wrong_version_built_is_rewritten(tmp_path):
    static = tmp_path / "static"
    install_assets(static, npm=_fake_npm(tmp_path))
    (static / "version.built").write_text("0.1.8")
    assert missing_assets(static) == ["version.built"]
    assert install_assets(static, npm="no-such-npm") == ["version.built"]  # no package needed


def test_errors_name_what_is_missing(tmp_path):
    with pytest.raises(RuntimeError, match="'no-such-npm' \\(the npm client\\) was not found"):
        install_assets(tmp_path / "s", npm="no-such-npm")
    with pytest.raises(RuntimeError, match="sjcl@1.0.7 has no file 'sjcl.js'"):
        install_assets(tmp_path / "s", npm=_fake_npm(tmp_path, broken="sjcl@1.0.7"))


def test_real_visdom_static_folder_is_complete_after_install():
    pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra; .ci/run installs it)")
    if missing_assets():  # CI runs `engine-rl dashboard --install-assets` before the tests
        install_assets()
    assert missing_assets() == []
