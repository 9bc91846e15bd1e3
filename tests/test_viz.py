"""viz: graphviz pictures of a module after a compile stage, and `tensorkiln viz`."""
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorkiln import graph
from tensorkiln.cli import main
from tensorkiln.viz import draw, module_after

sys.path.insert(0, str(Path(__file__).parent / "passes"))
from _graphs import conv_bn_relu, inception  # noqa: E402

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz 'dot' is not installed")


def test_fused_groups_are_drawn_as_clusters():
    picture = draw(module_after(inception(blocks=1), "fuse"), title="after fuse")
    assert picture.source.count("subgraph cluster_") == 8
    assert "fused_nn_conv2d_nn_relu" in picture.source and "after fuse" in picture.source


def test_stages_show_what_the_passes_did():
    x = graph.var("x", shape=(1, 3, 8, 8))
    mod = graph.Module.from_expr(conv_bn_relu(x, 3, 4))
    assert "nn.batch_norm" in draw(module_after(mod, "import")).source
    simplified = draw(module_after(mod, "simplify_inference")).source
    assert "nn.batch_norm" not in simplified and "nn.bias_add" in simplified
    assert "subgraph cluster_" not in simplified
    with pytest.raises(Exception, match="unknown pass 'fold_constant'"):
        module_after(mod, "fold_constant")


def _onnx_model(path):
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.float32), "w")
    bias = numpy_helper.from_array(np.ones((4,), dtype=np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model_graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                                    initializer=[weight, bias])
    onnx.save(helper.make_model(model_graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@needs_dot
def test_viz_command_writes_an_svg_with_clusters(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    _onnx_model(model)
    output = tmp_path / "graph.svg"
    assert main(["viz", str(model), "--after", "fuse", "-o", str(output)]) == 0
    svg = output.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert 'class="cluster"' in svg and "nn.conv2d" in svg
    assert f"wrote {output}" in capsys.readouterr().out


def test_viz_command_writes_dot_source_without_graphviz(tmp_path):
    model = tmp_path / "tiny.onnx"
    _onnx_model(model)
    output = tmp_path / "graph.dot"
    assert main(["viz", str(model), "--after", "import", "-o", str(output)]) == 0
    assert output.read_text().startswith("digraph tensorkiln")
