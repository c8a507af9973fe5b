"""Pictures of the partitioned graph: every graph edge is an arrow, drawn where it belongs in a real browser."""

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

import lite
from lite.schema.reader import read_model
from lite.tools import picture, zoo
from lite.tools.converter import convert
from lite.tools.inspector import summary
from tests.support.delegates import ConvAndConcat, inception_block

SVG = "{http://www.w3.org/2000/svg}"
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
RENDERERS = ["dot", "builtin"]


def placed(model, tmp_path, delegate):
    """The .lite graph of ``model`` and its partition report with ``delegate``."""
    path = tmp_path / "m.lite"
    convert(model, path)
    built = lite.Model()
    built.build_from_file(path, context=lite.Context(delegates=[delegate]))
    return read_model(path.read_bytes()), built.partition_report()


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return placed(zoo.resnet18(image_size=32), tmp_path_factory.mktemp("resnet"), ConvAndConcat())


@pytest.fixture(scope="module")
def inception(tmp_path_factory):
    return placed(inception_block(), tmp_path_factory.mktemp("inception"), ConvAndConcat())


@pytest.fixture(params=RENDERERS)
def renderer(request, monkeypatch):
    """Draws with graphviz's dot (skipped when it is not installed) or with the built-in layout."""
    if request.param == "dot" and shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed")
    if request.param == "builtin":
        monkeypatch.setattr(picture, "dot_svg", lambda drawn: None)
    return request.param


def graph_edges(graph):
    """(producer, consumer) node names for every non-constant tensor passed between nodes, and the inputs'."""
    producer = {graph.tensors[t].name: f"input {graph.tensors[t].name}" for t in graph.inputs}
    producer.update({graph.tensors[t].name: n.name for n in graph.nodes for t in n.outputs})
    return {(producer[graph.tensors[t].name], n.name) for n in graph.nodes for t in n.inputs
            if t >= 0 and not graph.tensors[t].is_const}


def drawn_edges(drawn):
    names = {b.id: b.details.get("node", f"input {b.label}") for b in drawn.boxes}
    return {(names[a.source], names[a.target]) for a in drawn.arrows if not a.target.startswith("out_")}


@pytest.mark.parametrize("model", ["resnet", "inception"])
def test_every_graph_edge_is_an_arrow(model, request):
    graph, rows = request.getfixturevalue(model)
    drawn = picture.scene(graph, rows)
    assert drawn_edges(drawn) == graph_edges(graph)
    assert sum(b.kind == "node" for b in drawn.boxes) == len(rows) == len(graph.nodes)
    assert len({a.id for a in drawn.arrows}) == len(drawn.arrows)


def test_the_resnet_shortcut_reaches_its_add(resnet):
    graph, rows = resnet
    drawn = picture.scene(graph, rows)
    boxes = {b.id: b for b in drawn.boxes}
    first_add = next(b for b in drawn.boxes if b.label == "AddFusion")
    sources = [boxes[a.source].label for a in drawn.arrows if a.target == first_add.id]
    assert sorted(sources) == ["Conv2DFusion", "MaxPoolFusion"]  # the body's last conv and the block input


def test_boxes_say_op_shape_and_place_and_the_legend_counts(inception):
    graph, rows = inception
    drawn = picture.scene(graph, rows)
    pool = next(b for b in drawn.boxes if b.label == "MaxPoolFusion")
    assert pool.place == "native" and pool.shape == "1x4x8x8"
    assert "ConvAndConcat: MaxPoolFusion is not in" in pool.details["why not delegated"]
    assert [text for _, text in drawn.legend] == ["ConvAndConcat: 7 nodes in 1 partition(s)",
                                                  "native CPU kernels: 1 node"]


def test_svg_has_a_group_per_box_and_an_arrowed_path_per_arrow(resnet, renderer):
    graph, rows = resnet
    svg, laid_out = picture.render_svg(graph, rows)
    assert laid_out == (renderer == "dot")
    groups = {g.get("id"): g for g in ET.fromstring(svg).iter(f"{SVG}g")}
    drawn = picture.scene(graph, rows)
    assert {b.id for b in drawn.boxes} <= set(groups)
    for arrow in drawn.arrows:
        group = groups[arrow.id]
        path = group.find(f".//{SVG}path")
        assert path is not None and path.get("d")
        assert group.find(f".//{SVG}polygon") is not None or path.get("marker-end")  # an arrowhead


def test_the_page_is_one_file_with_the_table_and_the_scene(inception, renderer):
    graph, rows = inception
    page, _ = picture.render_html(graph, rows, "inception", summary(rows))
    assert not re.search(r"""(src|href)=["']?(http|//|[\w./-]+\.(js|css))""", page)  # nothing to fetch
    assert page.count("<tr data-box=") == len(rows)
    scene = json.loads(re.search(r"<script type='application/json' id='scene'>(.*?)</script>", page).group(1))
    assert len(scene["arrows"]) == len(picture.scene(graph, rows).arrows)
    assert ("graphviz's dot was not found" in page) == (renderer == "builtin")


# ---- rendered in a real browser -------------------------------------------------------------------

CHECK = """<script>
const gap = (p, b) => Math.hypot(Math.max(b.x - p.x, 0, p.x - b.x - b.width),
                                 Math.max(b.y - p.y, 0, p.y - b.y - b.height));
const report = {arrows: [], overlaps: 0};
for (const a of scene.arrows) {
  const g = document.getElementById(a.id), path = g && g.querySelector('path');
  if (!path) { report.arrows.push({id: a.id, length: 0}); continue; }
  const length = path.getTotalLength();
  const head = !!g.querySelector('polygon') || !!path.getAttribute('marker-end');
  report.arrows.push({id: a.id, length, head,
    start: gap(path.getPointAtLength(0), document.getElementById(a.source).getBBox()),
    end: gap(path.getPointAtLength(length), document.getElementById(a.target).getBBox())});
}
const rects = scene.boxes.map(b => document.getElementById(b.id).getBBox());
rects.forEach((r, i) => rects.slice(i + 1).forEach(s => {
  if (r.x < s.x + s.width && s.x < r.x + r.width && r.y < s.y + s.height && s.y < r.y + r.height) report.overlaps++;
}));
const first = scene.boxes.find(b => b.kind === 'node');
document.getElementById(first.id).dispatchEvent(new MouseEvent('click', {bubbles: true}));
report.details = document.getElementById('details').textContent;
report.picked = document.querySelectorAll('g.picked').length;
const out = document.createElement('pre'); out.id = 'render-check'; out.textContent = JSON.stringify(report);
document.body.append(out);
</script></body>"""


def rendered(page: str, tmp_path) -> dict:
    """What a headless Chromium measured on the page: each arrow's length and its ends' distance to its boxes."""
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", CHECK), encoding="utf-8")
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom",
               path.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r'<pre id="render-check">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (apt install chromium)")
@pytest.mark.parametrize("model", ["resnet", "inception"])
def test_a_browser_draws_every_arrow_between_its_two_boxes(model, request, renderer, tmp_path):
    graph, rows = request.getfixturevalue(model)
    page, _ = picture.render_html(graph, rows, model, summary(rows))
    report = rendered(page, tmp_path)
    drawn = picture.scene(graph, rows)
    assert len(report["arrows"]) == len(drawn.arrows) > len(rows)
    for arrow in report["arrows"]:
        assert arrow["length"] > 5 and arrow["head"], arrow
        assert arrow["start"] < 3 and arrow["end"] < 12, arrow  # leaves its source, ends (arrowhead) at its target
    assert report["overlaps"] == 0
    assert report["picked"] == 1 and rows[0].node in report["details"]  # a click shows the node's details
