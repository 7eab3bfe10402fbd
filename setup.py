"""Build of the optional native folder listing (tidemark.storage._fastwalk); everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tidemark.storage._fastwalk",
            ["src/tidemark/storage/_fastwalk.c"],
            extra_compile_args=["-O2"],
            # A machine without a C compiler still installs tidemark; the walk falls back to os.scandir.
            optional=True,
        )
    ]
)
