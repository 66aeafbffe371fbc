# Sourced by the reproduction scripts: `merge_parts FOLDER [muxplm reproduce --merge options]` merges
# every part in FOLDER/parts into one table in FOLDER (`muxplm reproduce --merge`, which times every
# row again) and replaces FOLDER/log.txt only when the merge has succeeded.
merge_parts() {
    local folder=$1 log
    shift
    shopt -s nullglob
    local parts=("$folder"/parts/*/)
    [ "${#parts[@]}" -gt 0 ] || { echo "no parts under $folder/parts to merge" >&2; exit 2; }
    log=$(mktemp)
    python3 -m muxplm reproduce --merge "${parts[@]}" "$@" --output-dir "$folder" | tee "$log"
    mv "$log" "$folder/log.txt"
}
