"""Lines of each step class without docstrings (its own and its methods'; non-blank, and with
blank lines), and the settings counted over the constructors it inherits (PyMC's plumbing
left out: vars, model, blocked, rng, initial_point, compile_kwargs).

    python benchmarks/notes/step_class_size.py .
"""
import ast, sys, inspect, importlib
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
FILES = {"SurrogateHMC": "surrogate_hmc", "AdaptiveSurrogateHMC": "adaptive_surrogate_hmc",
         "VariationalHMC": "variational_hmc", "KernelHMC": "kernel_hmc", "SparseGridHMC": "sparse_grid_hmc"}
PLUMBING = {"self", "vars", "model", "blocked", "rng", "initial_point", "compile_kwargs", "kwargs"}
root = sys.argv[1] if len(sys.argv) > 1 else "."
for cls, mod in FILES.items():
    src = open(f"{root}/pymc_surrogate/step_methods/{mod}.py").read()
    tree = ast.parse(src)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    lines = set(range(node.lineno, node.end_lineno + 1))
    for n in ast.walk(node):
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body and \
           isinstance(n.body[0], ast.Expr) and isinstance(getattr(n.body[0], "value", None), ast.Constant) \
           and isinstance(n.body[0].value.value, str):
            lines -= set(range(n.body[0].lineno, n.body[0].end_lineno + 1))
    text = src.splitlines()
    count = sum(1 for i in lines if text[i - 1].strip())
    with_blank = len(lines)
    m = importlib.import_module(f"pymc_surrogate.step_methods.{mod}")
    C = getattr(m, cls)
    names = set()
    for k in C.__mro__:
        if "__init__" in k.__dict__ and k.__module__.startswith("pymc_surrogate"):
            names |= set(inspect.signature(k.__dict__["__init__"]).parameters)
    names -= PLUMBING
    print(f"{cls:22s} lines {count:4d} ({with_blank} with blank lines)  settings {len(names):2d} "
          f"{sorted(names)}")
