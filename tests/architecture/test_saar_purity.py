import subprocess
import sys


def test_saar_package_imports_neither_verl_nor_torch():
    code = (
        "import sys, pkgutil, importlib, cleaner.saar\n"
        "for module in pkgutil.iter_modules(cleaner.saar.__path__):\n"
        "    importlib.import_module('cleaner.saar.' + module.name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'verl', 'torch', 'transformers'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
