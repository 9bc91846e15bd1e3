"""viz.py: draw a graph Module with graphviz, as it is after a chosen compile stage.

    mod = module_after(from_onnx("model.onnx"), "fuse")     # or "import", or a pass name
    draw(mod, title="after fuse").render(outfile="graph.svg")

Each op is a box labelled with its name and result type; model inputs are
ellipses; a fused group (a primitive Function called from main) is a cluster
subgraph holding its ops, labelled with its kernel name. Constants are left
out unless `show_constants`, so the picture shows the dataflow.
The `tensorkiln viz` command wraps these two functions.
"""
from __future__ import annotations

from typing import Any

from .graph import Call, Constant, Function, Module, Tuple, TupleGetItem, Var, post_order

__all__ = ["draw", "module_after", "STAGES"]

# Stages besides the pass names: the imported graph, and the fused groups.
STAGES = ("import", "fuse")


def module_after(mod: Module, stage: str, target: Any = None, opt_level: int = 3) -> Module:
    """`mod` after compile stage `stage`: "import" (as given), a pass of GRAPH_PIPELINE (the
    pipeline up to and including it), another registered pass (that pass alone), or "fuse"
    (the whole pipeline, then fuse_ops)."""
    from .passes import GRAPH_PIPELINE, PassContext, PassManager, get_pass

    if stage == "import":
        return mod
    manager = PassManager(PassContext(opt_level=opt_level), target)
    if stage in ("fuse", "fuse_ops"):
        return manager.run(manager.run(mod, GRAPH_PIPELINE), ("fuse_ops",))
    get_pass(stage)  # an unknown name raises, listing the registered passes
    if stage in GRAPH_PIPELINE:
        return manager.run(mod, GRAPH_PIPELINE[:GRAPH_PIPELINE.index(stage) + 1])
    return manager.run(mod, (stage,))


def draw(mod: Module, title: str | None = None, show_constants: bool = False):
    """A graphviz.Digraph of `mod`'s main function; fused groups become clusters."""
    import graphviz

    dot = graphviz.Digraph("tensorkiln", graph_attr={"rankdir": "TB", "fontname": "Helvetica",
                                                     **({"label": title, "labelloc": "t"} if title else {})},
                           node_attr={"shape": "box", "style": "rounded,filled", "fillcolor": "white",
                                      "fontname": "Helvetica", "fontsize": "10"})
    names: dict[int, str | None] = {}   # id(node) -> the graphviz node that produces its value
    counter = iter(range(1 << 30))

    def new_name() -> str:
        return f"n{next(counter)}"

    def connect(graph, sources, target: str) -> None:
        for source in sources:
            if names.get(id(source)):
                graph.edge(names[id(source)], target)

    main = mod.main
    for param in main.params:
        names[id(param)] = new_name()
        dot.node(names[id(param)], f"{param.name}\n{param.checked_type}", shape="ellipse", fillcolor="#dbe9f6")
    groups = 0
    for node in post_order(main.body):
        if id(node) in names:
            continue
        if isinstance(node, Constant):
            names[id(node)] = None
            if show_constants:
                names[id(node)] = new_name()
                dot.node(names[id(node)], f"const {node.checked_type}", shape="note", fillcolor="#eeeeee")
        elif isinstance(node, Call) and isinstance(node.op, Function):
            names[id(node)] = _draw_group(dot, node, names, new_name, groups, show_constants)
            groups += 1
        elif isinstance(node, Call):
            names[id(node)] = new_name()
            dot.node(names[id(node)], f"{node.op.name}\n{node.checked_type}")
            connect(dot, node.args, names[id(node)])
        elif isinstance(node, Tuple):
            names[id(node)] = new_name()
            dot.node(names[id(node)], "tuple", shape="plaintext", style="")
            connect(dot, node.fields, names[id(node)])
        elif isinstance(node, TupleGetItem):
            names[id(node)] = new_name()
            dot.node(names[id(node)], f"[{node.index}]", shape="plaintext", style="")
            connect(dot, (node.tuple_value,), names[id(node)])
        elif isinstance(node, Var):
            names[id(node)] = None  # a free variable cannot occur in a verified module
    output = new_name()
    dot.node(output, f"output\n{main.body.checked_type}", shape="ellipse", fillcolor="#e3f1dc")
    connect(dot, (main.body,), output)
    return dot


def _draw_group(dot, call: Call, names: dict, new_name, index: int, show_constants: bool) -> str:
    """Draw fused group `call` as a cluster; returns the node of its result."""
    from .compiler.lower_groups import group_name

    function = call.op
    inner: dict[int, str | None] = {}
    outer_args = dict(zip((id(p) for p in function.params), call.args))
    with dot.subgraph(name=f"cluster_{index}") as cluster:
        cluster.attr(label=group_name(function), style="rounded,filled", fillcolor="#fff4d6", color="#d9a400",
                     fontname="Helvetica", fontsize="10")
        for node in post_order(function.body):
            if isinstance(node, Call):
                inner[id(node)] = new_name()
                cluster.node(inner[id(node)], f"{node.op.name}\n{node.checked_type}")
                for arg in node.args:
                    if id(arg) in inner and inner[id(arg)]:
                        cluster.edge(inner[id(arg)], inner[id(node)])
                    elif id(arg) in outer_args and names.get(id(outer_args[id(arg)])):
                        dot.edge(names[id(outer_args[id(arg)])], inner[id(node)])
                    elif isinstance(arg, Constant) and show_constants:
                        constant = new_name()
                        cluster.node(constant, f"const {arg.checked_type}", shape="note", fillcolor="#eeeeee")
                        cluster.edge(constant, inner[id(node)])
            elif isinstance(node, Tuple):
                inner[id(node)] = new_name()
                cluster.node(inner[id(node)], "tuple", shape="plaintext", style="")
                for field in node.fields:
                    if inner.get(id(field)):
                        cluster.edge(inner[id(field)], inner[id(node)])
    result = inner.get(id(function.body))
    if result is None:  # a group whose body is a parameter (a copy)
        result = new_name()
        dot.node(result, "copy")
    return result
