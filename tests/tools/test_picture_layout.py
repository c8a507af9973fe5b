"""The partition picture reads right in both layouts: no arrow runs through or into a box it does not
connect, and every partition is framed, around its own boxes only (issue 49, item 4)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import lite
from lite.delegates import load_delegate
from lite.schema.reader import read_model
from lite.tools import picture, zoo
from lite.tools.converter import convert
from lite.tools.inspector import summary
from tests.support import picture_geometry
from tests.support.delegates import ConvAndConcat
from tests.support.picture_geometry import check, partitions_of

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
MODELS = {"inception_block": lambda: zoo.inception_block(),
          "resnet18": lambda: zoo.resnet18(image_size=32),
          "mobilenet_v2": lambda: zoo.mobilenet_v2(image_size=32)}
DELEGATES = {"example_npu": lambda: load_delegate("example_npu", {}), "ConvAndConcat": ConvAndConcat}
NPU_CASES = [f"{name}/example_npu" for name in MODELS]
SPLIT = "resnet18/ConvAndConcat"  # 9 partitions between native adds (slow: its build takes several seconds)


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """The .lite graph of a zoo model and its partition report with a delegate ("MODEL/DELEGATE"),
    built once per case."""
    built: dict[str, tuple] = {}

    def place(case: str) -> tuple:
        if case not in built:
            name, delegate = case.split("/")
            path = tmp_path_factory.mktemp(name) / "m.lite"
            convert(MODELS[name](), path)
            model = lite.Model()
            model.build_from_file(path, context=lite.Context(delegates=[DELEGATES[delegate]()]))
            built[case] = read_model(path.read_bytes()), model.partition_report()
        return built[case]

    return place


@pytest.fixture(params=["dot", "builtin"])
def renderer(request, monkeypatch) -> str:
    """Draws with graphviz's dot (skipped when it is not installed) or with the built-in layout."""
    if request.param == "dot" and shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed")
    if request.param == "builtin":
        monkeypatch.setattr(picture, "dot_svg", lambda drawn: None)
    return request.param


@pytest.mark.parametrize("case", [NPU_CASES[0], *(pytest.param(c, marks=pytest.mark.slow)
                                                 for c in [*NPU_CASES[1:], SPLIT])])
def test_no_arrow_meets_a_foreign_box_and_every_partition_is_framed(case, placed, renderer):
    graph, rows = placed(case)
    svg, laid_out = picture.render_svg(graph, rows)
    assert laid_out == (renderer == "dot")
    arrows = picture.scene(graph, rows).arrows
    partitions = partitions_of(rows)
    problems = check(svg, partitions, ends={a.id: (a.source, a.target) for a in arrows})
    assert not problems, problems
    assert len(picture_geometry.read_picture(svg).edges) == len(arrows) and partitions


def box(box_id: str, place: str) -> picture.Box:
    kind = "input" if box_id.startswith("in_") else "output" if box_id.startswith("out_") else "node"
    return picture.Box(box_id, kind, box_id, "1x1", place, "#ffffff", {"node": box_id})


def interleaved() -> picture.Scene:
    """Two partitions side by side with native nodes between and around them, and long arrows past them."""
    places = {"in_0": "", "n_0": "A", "n_1": "native", "n_2": "B", "n_3": "A", "n_4": "B", "n_5": "A",
              "n_6": "native", "out_0": ""}
    pairs = ["in_0 n_0", "in_0 n_1", "in_0 n_2", "n_0 n_3", "n_1 n_3", "n_2 n_4", "n_1 n_4", "n_3 n_5",
             "n_0 n_5", "n_4 n_6", "n_5 n_6", "in_0 n_6", "n_2 n_6", "n_6 out_0"]
    arrows = [picture.Arrow(f"e_{k}", *pair.split(), "t", "1x1") for k, pair in enumerate(pairs)]
    return picture.Scene([box(b, p) for b, p in places.items()], arrows, [])


def test_partitions_side_by_side_are_framed_apart(renderer):
    drawn = interleaved()
    svg, _ = picture.drawn_svg(drawn)
    problems = check(svg, {"A": {"n_0", "n_3", "n_5"}, "B": {"n_2", "n_4"}})
    assert not problems, problems


MISDRAWN = """<svg xmlns="http://www.w3.org/2000/svg">
<g id="n_0" class="node"><rect x="0" y="0" width="100" height="40"/></g>
<g id="n_1" class="node"><rect x="120" y="80" width="100" height="40"/></g>
<g id="n_2" class="node"><rect x="120" y="160" width="100" height="40"/></g>
<g id="e_0" class="edge" data-source="n_0" data-target="n_2"><path d="M50,40 L50,100 L170,100 L170,160"/></g>
<g id="e_1" class="edge"><title>n_1&#45;&gt;n_2</title><path d="M170,120 C170,140 170,140 170,160"/></g>
<g id="p_0" class="cluster"><polygon points="-5,-5 225,-5 225,125 -5,125"/></g>
</svg>"""


def test_the_check_finds_an_arrow_into_a_foreign_box_and_a_missing_frame():
    problems = check(MISDRAWN, {"A": {"n_0", "n_1"}, "B": {"n_2"}})
    assert problems.crossings == ["e_0 (n_0->n_2) runs into n_1"]
    assert problems.unframed == ["B"]
    assert problems.strays == []
    assert check(MISDRAWN, {"A": {"n_0"}}).strays == ["n_1 inside A's frame"]


# ---- rendered in a real browser -------------------------------------------------------------------

CHECK = """<script>
const rect = id => document.getElementById(id).getBBox();
const inside = (p, r) => p.x > r.x - 1 && p.x < r.x + r.width + 1 && p.y > r.y - 1 && p.y < r.y + r.height + 1;
const report = {arrows: 0, frames: 0, crossings: [], unframed: [], strays: []};
for (const a of scene.arrows) {
  const path = document.getElementById(a.id).querySelector('path'), length = path.getTotalLength(), samples = [];
  for (let s = 0; s <= length; s += 2) samples.push(path.getPointAtLength(s));
  report.arrows++;
  for (const b of scene.boxes) {
    if (b.id !== a.source && b.id !== a.target && samples.some(p => inside(p, rect(b.id))))
      report.crossings.push(`${a.id} (${a.source}->${a.target}) runs into ${b.id}`);
  }
}
const frames = [...document.querySelectorAll('g.cluster')].map(g => g.querySelector('polygon,path,rect'));
report.frames = frames.length;
const framed = (id, f) => { const r = rect(id);
  return [[r.x + r.width / 2, r.y + r.height / 2], [r.x + 1, r.y + 1], [r.x + r.width - 1, r.y + 1],
          [r.x + r.width - 1, r.y + r.height - 1], [r.x + 1, r.y + r.height - 1]]
    .every(([x, y]) => f.isPointInFill(new DOMPoint(x, y))); };
const partitions = {};
scene.boxes.filter(b => b.details['graph kernel'])
  .forEach(b => (partitions[b.details['graph kernel']] ||= []).push(b.id));
for (const [name, members] of Object.entries(partitions)) {
  const frame = frames.find(f => members.every(id => framed(id, f)));
  if (!frame) { report.unframed.push(name); continue; }
  scene.boxes.filter(b => !members.includes(b.id) && framed(b.id, frame))
    .forEach(b => report.strays.push(`${b.id} inside ${name}'s frame`));
}
const out = document.createElement('pre'); out.id = 'layout-check'; out.textContent = JSON.stringify(report);
document.body.append(out);
</script></body>"""


def measured(page: str, tmp_path: Path) -> dict:
    """What a headless Chromium measured on the rendered page: arrows meeting foreign boxes (each arrow
    sampled every 2 px along its drawn path), partitions with no frame, and boxes in another's frame."""
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", CHECK), encoding="utf-8")
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom",
               path.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


BROWSER_CASES = NPU_CASES[:1] + [pytest.param(case, marks=pytest.mark.slow) for case in [*NPU_CASES[1:], SPLIT]]


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (apt install chromium)")
@pytest.mark.parametrize("case", BROWSER_CASES)
def test_a_browser_sees_no_arrow_into_a_foreign_box_and_every_partition_framed(case, placed, renderer, tmp_path):
    graph, rows = placed(case)
    page, _ = picture.render_html(graph, rows, case, summary(rows))
    report = measured(page, tmp_path)
    assert (report["crossings"], report["unframed"], report["strays"]) == ([], [], []), report
    assert report["arrows"] == len(picture.scene(graph, rows).arrows)
    assert report["frames"] == len(partitions_of(rows)) > 0
