"""The manual pages format without a warning at 80 columns (as `man --warnings`
checks in the container test), so a line too long to break is caught here."""
import glob
import os
import re
import subprocess

from conftest import BIN, ROOT


def test_manual_pages_format_without_warnings():
    pages = sorted(glob.glob(os.path.join(ROOT, "man", "*.[0-9]")))
    assert len(pages) == 6
    for page in pages:
        run = subprocess.run(["groff", "-mandoc", "-ww", "-Tutf8", "-rLL=78n", page], capture_output=True, text=True)
        assert run.returncode == 0 and run.stderr == "", f"{page}: {run.stderr}"


def page_text(name):
    """The page as a reader sees it (formatted, no hyphenation at line ends)."""
    run = subprocess.run(["groff", "-mandoc", "-Tutf8", "-rLL=200n", "-rHY=0", os.path.join(ROOT, "man", name)],
                         capture_output=True, text=True)
    return re.sub(r".\x08", "", run.stdout)


def source(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def test_every_config_key_is_in_tokend_toml_5():
    text = page_text("tokend.toml.5")
    keys = set()
    for names in re.findall(r"allowOnly\(\[(.*?)\]\)", source("Sources/Config/Configuration+Parse.swift"), re.S):
        keys.update(re.findall(r'"([a-z][a-z0-9-]*)"', names))
    assert len(keys) > 30, keys
    missing = sorted(k for k in keys if not re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text))
    assert missing == [], f"keys missing from tokend.toml(5): {missing}"


def test_every_tokenctl_command_and_exit_code_is_in_tokenctl_1():
    text = page_text("tokenctl.1")
    help_text = subprocess.run([os.path.join(BIN, "tokenctl"), "--help"], capture_output=True, text=True).stdout
    commands = re.findall(r"^  ([a-z][a-z-]+)\s", help_text.split("SUBCOMMANDS:")[1], re.M)
    assert len(commands) >= 10, help_text
    assert [c for c in commands if c != "help" and c not in text] == []
    codes = {int(n) for n in re.findall(r"static let \w+: Int32 = (\d+)", source("Sources/TokenctlProgram/Tokenctl.swift"))}
    status = text.split("EXIT STATUS")[1].split("EXAMPLES")[0]
    assert len(codes) >= 9 and [c for c in sorted(codes) if not re.search(rf"\b{c}\b", status)] == []


def test_the_interface_and_exit_status_are_in_tokend_8():
    text = page_text("tokend.8")
    declaration = source("Sources/TokendInterface/io.tokend.Broker.varlink")
    names = re.findall(r"^(?:method|error) (\w+)", declaration, re.M)
    assert len(names) > 25
    assert [n for n in names if n not in text] == [], "methods or errors missing from tokend(8)"
    codes = {int(n) for n in re.findall(r"let exit\w+: Int32 = (\d+)", source("Sources/TokendProgram/Tokend.swift"))}
    status = text.split("EXIT STATUS")[1].split("SEE ALSO")[0]
    assert codes and [c for c in sorted(codes) if not re.search(rf"\b{c}\b", status)] == []


def test_every_tokend_webview_option_is_in_its_page():
    from webview import WEBVIEW
    text = page_text("tokend-webview.1")
    usage = subprocess.run([WEBVIEW, "--help"], capture_output=True, text=True).stdout
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", usage))
    assert {"--session", "--socket", "--fullscreen", "--help"} <= options, usage
    assert [o for o in sorted(options) if o not in text] == []
