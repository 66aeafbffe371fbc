# Sourced by the benchmark scripts that train with one pinned commit: `use_pinned_code COMMIT RUNS`
# checks COMMIT out once into RUNS/code-COMMIT (a detached git worktree) and imports muxplm from
# there, so a run of many hours keeps one code whatever the working tree does meanwhile. Sets CODE
# to the commit's 12-digit hash.
use_pinned_code() {
    CODE=$(git rev-parse --short=12 "$1^{commit}")
    local src="$2/code-$CODE"
    [ -d "$src/src/muxplm" ] || { mkdir -p "$2"; git worktree add --detach "$src" "$CODE"; }
    src=$(cd "$src/src" && pwd)
    export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c "import muxplm, sys; sys.exit(not muxplm.__file__.startswith('$src'))" \
        || { echo "muxplm is not imported from $src" >&2; return 1; }
}
