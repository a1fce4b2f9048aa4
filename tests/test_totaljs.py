"""totaljs: recognising a Total.js project from its files, and the rules that check the code
blocks of an answer, each with answers that break it and answers that pass it."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from totem.workspace import totaljs
from totem.workspace.totaljs import check_answer, detect


def write(root, files):
    """Create `files` ({relative path: text, or None for a folder}) below `root`."""
    for relative, text in files.items():
        path = os.path.join(root, relative)
        if text is None:
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)


def manifest(**sections):
    return json.dumps({"name": "app", "version": "1.0.0", **sections})


def fenced(code, language="js"):
    return f"Here is the code:\n\n```{language}\n{code}\n```\n\nThat is all."


def rules(validation):
    return [(problem["rule"], problem["severity"]) for problem in validation.problems]


# --- detect --------------------------------------------------------------------------------

DETECTED = [
    # (files, version, reason)
    ({"package.json": manifest(dependencies={"total5": "latest"})}, 5, "package.json depends on total5"),
    ({"package.json": manifest(dependencies={"total4": "^0.0.90"})}, 4, "package.json depends on total4"),
    ({"package.json": manifest(devDependencies={"total4": "*"})}, 4, "package.json depends on total4"),
    ({"package.json": manifest(peerDependencies={"total5": "*"})}, 5, "package.json depends on total5"),
    ({"package.json": manifest(dependencies={"total4": "*", "total5": "*"})}, None,
     "package.json depends on both total4 and total5"),
    ({"package.json": manifest(dependencies={"total.js": "^3.4.13"})}, None,
     "package.json depends on total.js, the package of Total.js 3 and older (not version 4 or 5)"),
    # the layout and a start script
    ({"controllers/default.js": "", "public/index.html": "",
      "index.js": "require('total4/debug')({ port: 8000 });\n"}, 4,
     "index.js requires total4 and the project has the folders controllers/, public/"),
    ({"schemas/users.js": "", "definitions/db.js": "", "views/index.html": "",
      "index.js": "// Total.js v5\nrequire('total5').run({ release: process.argv.includes('--release') });\n"}, 5,
     "index.js requires total5 and the project has the folders schemas/, definitions/, views/"),
    ({"plugins/admin/index.js": "", "resources/default.resource": "",
      "debug.js": "var type = 'debug';\nrequire('total4/' + type)({});\n"}, 4,
     "debug.js requires total4 and the project has the folders plugins/, resources/"),
    ({"controllers/api.js": "", "schemas/x.js": "", "release.js": "import total from 'total5';\n"}, 5,
     "release.js requires total5 and the project has the folders controllers/, schemas/"),
    ({"controllers/api.js": "", "views/x.html": "", "index.js": "require('total.js').http('debug');\n"}, None,
     "index.js requires total.js and the project has the folders controllers/, views/"),
    # a broken package.json is only "not from package.json": the layout still counts
    ({"package.json": "{ not json", "controllers/a.js": "", "public/a.css": "",
      "index.js": "require('total5').run({});"}, 5,
     "index.js requires total5 and the project has the folders controllers/, public/"),
]


@pytest.mark.parametrize(("files", "version", "reason"), DETECTED)
def test_detect_totaljs(tmp_path, files, version, reason):
    """Each way of detection finds the project, its version and says why."""
    write(tmp_path, files)
    assert detect(str(tmp_path)) == totaljs.Detection(True, version, reason)


NOT_DETECTED = [
    # (files, reason)
    ({"package.json": manifest(dependencies={"express": "^4.18.0"}), "index.js": "require('express')()",
      "public/index.html": "", "views/a.html": ""},
     "package.json lists no Total.js package, and the folders are not a Total.js layout"),
    ({"pyproject.toml": "[project]\nname = 'x'\n", "app/__init__.py": "", "tests/test_x.py": ""},
     "there is no package.json, and the folders are not a Total.js layout"),
    # the folders alone are not enough: the start script must require the framework
    ({"controllers/a.js": "", "views/a.html": "", "index.js": "require('express')();\n"},
     "there is no package.json, and although the project has the folders controllers/, views/, no "
     "index.js, debug.js, release.js requires total4, total5 or total.js"),
    # a commented-out require does not count
    ({"controllers/a.js": "", "views/a.html": "", "index.js": "// require('total4/debug')();\n"},
     "there is no package.json, and although the project has the folders controllers/, views/, no "
     "index.js, debug.js, release.js requires total4, total5 or total.js"),
    # public/ and views/ alone are any web project
    ({"public/a.css": "", "views/a.html": "", "index.js": "require('total4/debug')();\n"},
     "there is no package.json, and the folders are not a Total.js layout"),
    # one framework folder is not a layout
    ({"controllers/a.js": "", "index.js": "require('total4/debug')();\n"},
     "there is no package.json, and the folders are not a Total.js layout"),
    ({"package.json": "[1, 2]"}, "package.json was not read (it is not a JSON object), and the folders are not "
                                 "a Total.js layout"),
    ({"package.json": "[" * 100_000}, "package.json was not read (it is not valid JSON), and the folders are "
                                      "not a Total.js layout"),
    ({"package.json": manifest(dependencies=["total4"])},
     "package.json lists no Total.js package, and the folders are not a Total.js layout"),
    ({"package.json": manifest(description="x" * totaljs.MAX_PACKAGE_JSON_BYTES, dependencies={"total4": "*"})},
     "package.json was not read (package.json is larger than 256 KB), and the folders are not a Total.js layout"),
    ({}, "there is no package.json, and the folders are not a Total.js layout"),
]


@pytest.mark.parametrize(("files", "reason"), NOT_DETECTED)
def test_detect_not_totaljs(tmp_path, files, reason):
    """A plain Node project, a Python project and look-alikes are not Total.js, and the reason says why."""
    write(tmp_path, files)
    assert detect(str(tmp_path)) == totaljs.Detection(False, None, reason)


def test_detect_package_json_link_outside_not_followed(tmp_path):
    """A package.json that links to one outside the project is not read."""
    outside = tmp_path / "outside"
    project = tmp_path / "project"
    write(outside, {"package.json": manifest(dependencies={"total5": "*"})})
    project.mkdir()
    os.symlink(outside / "package.json", project / "package.json")
    assert detect(str(project)) == totaljs.Detection(
        False, None, "package.json was not read (package.json leads outside the project), and the folders are "
                     "not a Total.js layout")


def test_detect_folder_links_outside_not_counted(tmp_path):
    """Framework folders and a start script reached through links that lead outside do not count."""
    outside = tmp_path / "outside"
    project = tmp_path / "project"
    write(outside, {"controllers/a.js": "", "schemas/b.js": "", "index.js": "require('total4/debug')();"})
    write(project, {"views/a.html": ""})
    for name in ("controllers", "schemas", "index.js"):
        os.symlink(outside / name, project / name)
    assert detect(str(project)).totaljs is False
    # the same project with its own folders and a start script that links outside
    for name in ("controllers", "schemas"):
        os.unlink(project / name)
        (project / name).mkdir()
    assert detect(str(project)) == totaljs.Detection(
        False, None, "there is no package.json, and although the project has the folders controllers/, "
                     "schemas/, views/, no index.js, debug.js, release.js requires total4, total5 or total.js")


def test_detect_package_json_link_inside_followed(tmp_path):
    """A package.json that links to a file inside the project is read."""
    write(tmp_path, {"config/package.json": manifest(dependencies={"total4": "*"})})
    os.symlink(tmp_path / "config" / "package.json", tmp_path / "package.json")
    assert detect(str(tmp_path)) == totaljs.Detection(True, 4, "package.json depends on total4")


def test_detect_package_json_fifo_does_not_hang(tmp_path):
    """A FIFO named package.json is refused without blocking."""
    os.mkfifo(tmp_path / "package.json")
    assert detect(str(tmp_path)).reason.startswith("package.json was not read (package.json is not a regular file)")


def test_detect_start_file_read_bounded(tmp_path):
    """Only the first MAX_START_FILE_BYTES of index.js are read."""
    padding = "// " + "x" * totaljs.MAX_START_FILE_BYTES + "\n"
    write(tmp_path, {"controllers/a.js": "", "views/a.html": "", "index.js": padding + "require('total4/debug')();"})
    assert detect(str(tmp_path)).totaljs is False
    write(tmp_path, {"index.js": "require('total4/debug')();\n" + padding})
    assert detect(str(tmp_path)).version == 4


@pytest.mark.parametrize("root", ["/nonexistent/totem-test", "bad\x00root", ""])
def test_detect_bad_root_never_raises(root):
    """A missing or impossible root is simply not a Total.js project."""
    assert detect(root).totaljs is False


# --- check_answer: the rules, each with failing and passing answers ------------------------

CONTROLLER = """exports.install = function() {
\tROUTE('GET /api/users/', users);
\tROUTE('SOCKET /chat/', chat);
\tROUTE('FILE /docs/*.pdf', pdf);
};

function users($) {
\t$.json([{ id: 1, name: 'Ann' }]);
}
"""

RULE_CASES = [
    # (rule, answer, cut, expected [(rule, severity)], block, line)
    # cut
    ("cut", fenced("ROUTE('GET /', home);")[:-20], False, [("cut", "error")], 1, None),
    ("cut", fenced("ROUTE('GET /', home);"), True, [("cut", "error")], None, None),
    ("cut", "Just prose, cut at the li", True, [("cut", "error")], None, None),
    ("cut", "```js\nfunction a() {\n  if (x) {", False, [("cut", "error")], 1, None),
    ("cut", fenced("ROUTE('GET /', home);"), False, [], None, None),
    ("cut", "~~~\n```\nnot a closing fence\n~~~\n", False, [], None, None),
    ("cut", "````md\n```js\nx(\n```\n````\n", False, [], None, None),
    # unbalanced
    ("unbalanced", fenced("function a() {\n  return (1 + 2;\n}"), False, [("unbalanced", "error")], 1, 3),
    ("unbalanced", fenced("const a = [1, 2;\n"), False, [("unbalanced", "error")], 1, 1),
    ("unbalanced", fenced("ROUTE('GET /', home));"), False, [("unbalanced", "error")], 1, 1),
    ("unbalanced", fenced("exports.install = function() {\n  ROUTE('GET /', home);\n"), False,
     [("unbalanced", "error")], 1, 1),
    ("unbalanced", fenced("var s = 'not closed;\nvar t = 1;"), False, [("unbalanced", "error")], 1, 1),
    ("unbalanced", fenced("var s = `a ${b ? `c` : 'd'} e;\n"), False, [("unbalanced", "error")], 1, 1),
    ("unbalanced", fenced("a();\n/* never closed\nb();"), False, [("unbalanced", "error")], 1, 2),
    ("unbalanced", fenced("<div>\n<script>\nfunction a() {\n</script>\n</div>", "html"), False,
     [("unbalanced", "error")], 1, 3),
    ("unbalanced", fenced("require('fs');\nfunction f() { return (1; }", ""), False, [("unbalanced", "error")], 1, 2),
    ("unbalanced", fenced(CONTROLLER), False, [], None, None),
    ("unbalanced", fenced("var s = ')]}' + \"({[\" + `(${ {a: 1}.a })` + '\\')';"), False, [], None, None),
    ("unbalanced", fenced("// an open ( in a comment\n/* and { here */\nvar a = 1;"), False, [], None, None),
    ("unbalanced", fenced("var re = /[(\\[{]/g;\nvar b = s.replace(/\\)/, '');\nif (x) { y(); }"), False,
     [], None, None),
    ("unbalanced", fenced("var half = total / 2 / (count || 1);\nvar r = a++ / 2;"), False, [], None, None),
    ("unbalanced", fenced("return typeof x === 'string' ? /^\\(/.test(x) : false;"), False, [], None, None),
    ("unbalanced", fenced("var t = `line ${a}\nline ${ fn({ b: `inner ${c}` }) }`;"), False, [], None, None),
    ("unbalanced", fenced("#!/usr/bin/env node\nrequire('fs');"), False, [], None, None),
    ("unbalanced", fenced("def f(:\n    pass", "python"), False, [], None, None),
    ("unbalanced", fenced("echo ( unbalanced", "sh"), False, [], None, None),
    ("unbalanced", fenced("It's (just text", ""), False, [], None, None),
    ("unbalanced", fenced("<script type=\"text/html\">\n{{ if a }( }}\n</script>", "html"), False, [], None, None),
    ("unbalanced", fenced("<p>(</p>\n<script>\nvar a = { b: [1] };\n</script>", "html"), False, [], None, None),
    # empty-block
    ("empty-block", "```js\n\n   \n```\n", False, [("empty-block", "warning")], 1, None),
    ("empty-block", "```\n```\n", False, [("empty-block", "warning")], 1, None),
    ("empty-block", fenced("F.on('ready', NOOP);"), False, [], None, None),
]


@pytest.mark.parametrize(("rule", "answer", "cut", "expected", "block", "line"), RULE_CASES)
def test_check_answer_rules(rule, answer, cut, expected, block, line):
    """Each rule reports what breaks it, with its block and line, and passes what does not."""
    validation = check_answer(answer, root=None, version=5, cut=bool(cut))
    assert rules(validation) == expected
    assert validation.blocking is any(severity == "error" for _rule, severity in expected)
    if expected:
        assert validation.problems[0].get("block") == block
        assert validation.problems[0].get("line") == line
        assert validation.problems[0]["message"]


def test_check_answer_unbalanced_messages():
    """The messages name the bracket, and the line where it is opened or closed."""
    cases = [
        ("function a() {\n  return (1 + 2;\n}", "`}` on line 3 does not match the `(` opened on line 2: a "
                                                 "bracket is missing or extra before it"),
        ("a();\n}", "`}` on line 2 has no `{` before it: remove it or add the missing `{`"),
        ("if (a) {\n  b();\n", "the `{` opened on line 1 is never closed: add the missing `}`"),
        ("var s = 'x;", "the string opened with ' on line 1 is not closed on that line: add the missing '"),
        ("var t = `x\n", "the template literal opened on line 1 is never closed: add the missing `"),
    ]
    for code, message in cases:
        assert check_answer(fenced(code), root=None, version=None, cut=False).problems[0]["message"] == message


def test_check_answer_cut_message():
    """An unclosed last fence says the last code block is incomplete."""
    validation = check_answer("```js\nROUTE(", root=None, version=4, cut=True)
    assert validation.view() == {"problems": [{
        "rule": "cut", "severity": "error", "block": 1,
        "message": "the answer was cut at the output limit: the last code block is incomplete"}], "blocking": True}


@pytest.fixture
def project(tmp_path):
    write(tmp_path, {"package.json": manifest(dependencies={"total5": "*", "nodemailer": "^6"},
                                              devDependencies={"@types/node": "*", "mocha": "*"},
                                              optionalDependencies={"sharp": "*"},
                                              peerDependencies={"@aws-sdk/client-s3": "*"})})
    return str(tmp_path)


REQUIRE_CASES = [
    # (code, language, expected [(rule, severity)], line)
    ("const x = require('lodash');", "js", [("require-missing", "error")], 1),
    ("\nimport express from 'express';", "js", [("require-missing", "error")], 2),
    ("import { a,\n  b } from \"left-pad\";", "mjs", [("require-missing", "error")], 2),
    ("const m = await import('chalk');", "js", [("require-missing", "error")], 1),
    ("import 'dotenv/config';", "js", [("require-missing", "error")], 1),
    ("export { x } from '@scope/pkg/sub';", "ts", [("require-missing", "error")], 1),
    ("const x = require(`axios`);", "js", [("require-missing", "error")], 1),
    ("<script>\nconst x = require('moment');\n</script>", "html", [("require-missing", "error")], 2),
    ("const x = require('lodash');\nconsole.log(x);", "", [("require-missing", "error")], 1),
    ("import type { Y } from 'left-pad';", "ts", [("require-missing", "error")], 1),
    # the same package once, at its first use
    ("require('lodash');\nrequire('lodash/fp');\nrequire('lodash');", "js", [("require-missing", "error")], 1),
    # present, built-in, relative or not a package
    ("const fs = require('fs');\nconst p = require('node:path');\nconst t = require('node:test');", "js", [], None),
    ("require('fs/promises'); require('child_process'); require('worker_threads');", "js", [], None),
    ("require('./helper'); require('../lib/x'); require('/abs/x'); import('#internal');", "js", [], None),
    ("const mail = require('nodemailer');\nrequire('mocha'); require('sharp');", "js", [], None),
    ("import { S3Client } from '@aws-sdk/client-s3/dist';", "js", [], None),
    ("import type { Server } from 'node';", "ts", [], None),
    ("require('total5').run({});", "js", [], None),
    ("require(name); require('a' + b); require(`${x}`);", "js", [], None),
    ("// require('lodash')\nvar s = \"require('lodash')\";", "js", [], None),
    ("schema.require('x'); obj.import('y'); import.meta.url;", "js", [], None),
    ("import https from 'https://cdn.example.com/x.js';", "js", [], None),
    ("pip install requests\nimport requests", "sh", [], None),
    ("import requests\nfrom x import y", "python", [], None),
]


@pytest.mark.parametrize(("code", "language", "expected", "line"), REQUIRE_CASES)
def test_check_answer_require_missing(project, code, language, expected, line):
    """A package the project's package.json does not list is an error; built-ins, relative paths,
    listed packages and the framework of the detected version are not."""
    validation = check_answer(fenced(code, language), root=project, version=5, cut=False)
    assert rules(validation) == expected
    if expected:
        assert validation.problems[0]["line"] == line
        assert validation.blocking is True


def test_check_answer_require_missing_message(project):
    """The message names the package and what to do."""
    validation = check_answer(fenced("const _ = require('lodash/fp');"), root=project, version=5, cut=False)
    assert validation.problems == [{
        "rule": "require-missing", "severity": "error", "block": 1, "line": 1,
        "message": "`lodash` is used on line 1 but the project's package.json does not list it: add it (npm "
                   "install lodash) or use a package the project has"}]


def test_check_answer_require_missing_installed_by_answer(project):
    """A package the answer says to install is a warning, not an error."""
    answer = "Install it first: `npm install --save dayjs@1.11`\n\n" + fenced("const dayjs = require('dayjs');")
    validation = check_answer(answer, root=project, version=5, cut=False)
    assert rules(validation) == [("require-missing", "warning")]
    assert validation.blocking is False
    answer = "```sh\nyarn add @scope/tool\n```\n" + fenced("import tool from '@scope/tool/x';")
    assert rules(check_answer(answer, root=project, version=5, cut=False)) == [("require-missing", "warning")]


def test_check_answer_require_missing_only_with_package_json(tmp_path):
    """Without a root, or a root without a package.json, packages are not checked."""
    answer = fenced("require('lodash');")
    assert check_answer(answer, root=None, version=5, cut=False).problems == []
    assert check_answer(answer, root=str(tmp_path), version=5, cut=False).problems == []


@pytest.mark.parametrize(("content", "failure"), [
    ("{ broken", "it is not valid JSON"),
    ("\"a string\"", "it is not a JSON object"),
    (manifest(description="x" * totaljs.MAX_PACKAGE_JSON_BYTES), "package.json is larger than 256 KB"),
])
def test_check_answer_require_missing_unreadable_package_json(tmp_path, content, failure):
    """A package.json that cannot be read makes each package a warning that says why."""
    write(tmp_path, {"package.json": content})
    validation = check_answer(fenced("require('lodash'); require('fs');"), root=str(tmp_path), version=None,
                              cut=False)
    assert validation.view() == {"problems": [{
        "rule": "require-missing", "severity": "warning", "block": 1, "line": 1,
        "message": f"could not check that `lodash` is installed: the project's package.json was not read ({failure})"}],
        "blocking": False}


def test_check_answer_require_missing_framework_by_version(tmp_path):
    """total4/total5 count as present when they match the version; with no version they are checked."""
    write(tmp_path, {"package.json": manifest(dependencies={})})
    root = str(tmp_path)
    assert rules(check_answer(fenced("require('total4/debug')();"), root=root, version=4, cut=False)) == []
    assert rules(check_answer(fenced("require('total5').run({});"), root=root, version=5, cut=False)) == []
    assert rules(check_answer(fenced("require('total5').run({});"), root=root, version=None, cut=False)) == [
        ("require-missing", "error")]
    # a mismatching one is reported once, by wrong-version-api
    assert rules(check_answer(fenced("require('total4/debug')();"), root=root, version=5, cut=False)) == [
        ("wrong-version-api", "error")]


WRONG_VERSION_CASES = [
    # (code, version, expected [(rule, severity)])
    ("exports.install = function() {\n\tF.route('/', view_index);\n};", 4, [("wrong-version-api", "error")]),
    ("exports.install = function() {\n\tF.route('/', view_index, ['get']);\n};", 5, [("wrong-version-api", "error")]),
    ("framework.route('/api/', json_api, ['post']);", 4, [("wrong-version-api", "error")]),
    ("F.websocket('/chat/', chat, ['json']);", 5, [("wrong-version-api", "error")]),
    ("F.file('/img/*.jpg', image);", 4, [("wrong-version-api", "warning")]),
    ("require('total.js').http('debug');", 4, [("wrong-version-api", "error")]),
    ("import total from 'total.js';", 5, [("wrong-version-api", "error")]),
    ("require('total4/release')({});", 5, [("wrong-version-api", "error")]),
    ("require('total5').run({});", 4, [("wrong-version-api", "error")]),
    # each call once a block
    ("F.route('/a', a);\nF.route('/b', b);", 4, [("wrong-version-api", "error")]),
    # the APIs of 4 and 5
    (CONTROLLER, 4, []),
    (CONTROLLER, 5, []),
    ("require('total4/debug')({ port: 8000 });", 4, []),
    ("require('total5').run({ port: 8000 });", 5, []),
    ("F.on('ready', function() {});\nvar t = F.resource('default', 'title');", 5, []),
    # not calls of the framework
    ("app.F.route('/');\n// F.route('/', x);\nvar s = 'F.route(';\nF.routes.web.length;", 4, []),
    # with the version unknown (or 3), nothing is decided
    ("F.route('/', x);\nrequire('total.js');", None, []),
    ("F.route('/', x);\nrequire('total.js');", 3, []),
]


@pytest.mark.parametrize(("code", "version", "expected"), WRONG_VERSION_CASES)
def test_check_answer_wrong_version_api(code, version, expected):
    """An API of another Total.js version is reported for a 4 or 5 project; their own APIs pass."""
    assert rules(check_answer(fenced(code), root=None, version=version, cut=False)) == expected


def test_check_answer_wrong_version_messages():
    """The messages say what the project's version uses instead."""
    validation = check_answer(fenced("x();\nF.route('/', home);"), root=None, version=4, cut=False)
    assert validation.problems == [{
        "rule": "wrong-version-api", "severity": "error", "block": 1, "line": 2,
        "message": "F.route() is the Total.js 3 API, not part of Total.js 4: register the route with the global "
                   "ROUTE('GET /path', action)"}]
    validation = check_answer(fenced("require('total4/debug')();"), root=None, version=5, cut=False)
    assert validation.problems[0]["message"] == (
        "`total4` is the package of Total.js 4, but this project uses Total.js 5: use `total5` (its start script "
        "is require('total5').run({...}))")


def test_check_answer_blocks_numbered_across_languages():
    """Blocks are numbered among all fences, whatever their language, and lines within the block."""
    answer = ("```sh\nnpm install total5\n```\n\nText.\n\n~~~json\n{\"a\": 1}\n~~~\n\n"
              "- In a list:\n\n  ```javascript\n  ROUTE('GET /', home);\n  var a = (1;\n  ```\n")
    validation = check_answer(answer, root=None, version=5, cut=False)
    assert [(p["rule"], p["block"], p["line"]) for p in validation.problems] == [("unbalanced", 3, 2)]


def test_check_answer_file_name_as_language():
    """A block tagged with a .js file name is checked as JavaScript."""
    validation = check_answer(fenced("var a = (1;", "controllers/api.js"), root=None, version=5, cut=False)
    assert rules(validation) == [("unbalanced", "error")]


# --- check_answer: limits and any text -----------------------------------------------------


def test_check_answer_too_long_checks_prefix():
    """An answer past MAX_ANSWER_CHARS is checked up to it, with a warning; the cut fence there is not `cut`."""
    answer = "```js\n" + "var a = 1;\n" * (totaljs.MAX_ANSWER_CHARS // 10)
    validation = check_answer(answer, root=None, version=5, cut=False)
    assert rules(validation) == [("not-checked", "warning")]
    assert validation.blocking is False


def test_check_answer_too_many_blocks():
    """Blocks past MAX_BLOCKS are not checked, with a warning."""
    answer = fenced("var ok = 1;") * totaljs.MAX_BLOCKS + fenced("var a = (1;")
    validation = check_answer(answer, root=None, version=5, cut=False)
    assert rules(validation) == [("not-checked", "warning")]
    assert validation.problems[0]["message"] == (
        f"the answer has {totaljs.MAX_BLOCKS + 1} code blocks: only the first {totaljs.MAX_BLOCKS} were checked")


def test_check_answer_problems_capped_errors_kept():
    """Past MAX_PROBLEMS the list is cut, keeping the errors, and says how many were left out."""
    answer = "```\n```\n" * 60 + fenced("var a = (1;")
    validation = check_answer(answer, root=None, version=5, cut=False)
    assert len(validation.problems) == totaljs.MAX_PROBLEMS
    assert ("unbalanced", "error") in rules(validation)
    assert validation.problems[-1] == {"rule": "not-checked", "severity": "warning",
                                       "message": "12 more problems were found but are not listed"}
    assert validation.blocking is True


def test_validation_view_is_a_copy():
    """view() gives the protocol's dict, and changing it does not change the validation."""
    validation = check_answer("```\n```", root=None, version=None, cut=False)
    view = validation.view()
    view["problems"][0]["rule"] = "changed"
    assert validation.problems[0]["rule"] == "empty-block"
    assert set(view) == {"problems", "blocking"}


def test_check_answer_crlf_and_no_blocks():
    """Windows line ends are read like \\n, and an answer without code has no problem."""
    assert check_answer("```js\r\nvar a = (1;\r\n```\r\n", root=None, version=5, cut=False).problems[0]["line"] == 1
    assert check_answer("No code here.", root=None, version=5, cut=False).view() == {"problems": [],
                                                                                   "blocking": False}


JS_PIECES = st.sampled_from(["(", ")", "[", "]", "{", "}", "'", '"', "`", "${", "/", "//", "/*", "*/", "\\",
                             "\n", " ", "require('x')", "import y from 'z'", "F.route(", "```", "```js\n",
                             "~~~", "<script>", "</script>", "```html\n", "\r", "\x00", "\u2028", "a", "1"])
ANSWERS = st.text(max_size=300) | st.lists(JS_PIECES, max_size=80).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=ANSWERS, version=st.sampled_from([None, 3, 4, 5]), cut=st.booleans())
def test_check_answer_never_raises(project, answer, version, cut):
    """Any text gives a Validation whose blocking says whether an error is listed."""
    validation = check_answer(answer, root=project, version=version, cut=cut)
    assert validation.blocking is any(problem["severity"] == "error" for problem in validation.problems)
    for problem in validation.problems:
        assert problem["rule"] in {"cut", "unbalanced", "require-missing", "wrong-version-api", "empty-block",
                                   "not-checked"}
        assert problem["severity"] in {"error", "warning"}
        assert isinstance(problem["message"], str) and problem["message"]
        assert problem.get("block", 1) >= 1 and problem.get("line", 1) >= 1
