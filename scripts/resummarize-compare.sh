#!/usr/bin/env bash
# Re-summarizes every committed record with two tuner builds, into copies
# (the committed folders are not touched), and compares what they write:
# record.md, summary.csv, plot.svg and `summarize --json`, byte for byte.
# For a change that must not move any record (a restructure, a rename).
#
#   scripts/resummarize-compare.sh OLD_TUNER NEW_TUNER
# Prints one line per record that differs and a count; exit 1 when any does.
set -euo pipefail
old=$1; new=$2
[ -x "$old" ] && [ -x "$new" ] || { echo "usage: $0 OLD_TUNER NEW_TUNER (two built tuner binaries)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0; differ=0
for dir in records/*/; do
    dir=${dir%/}
    [ -f "$dir/raw.jsonl" ] || continue
    name=$(basename "$dir")
    for side in old new; do
        # The same folder name on both sides: record.md names its folder.
        mkdir -p "$work/$side/$name"
        cp "$dir/raw.jsonl" "$work/$side/$name/"
        [ -f "$dir/prompts.jsonl" ] && cp "$dir/prompts.jsonl" "$work/$side/$name/"
        bin=$old; [ "$side" = new ] && bin=$new
        # The printed paths name the side's folder: read as SIDE.
        { "$bin" summarize "$work/$side/$name" 2>&1 || echo "exit $?"; } | sed "s#$work/$side/#SIDE/#g" > "$work/$side/$name.out"
        "$bin" summarize --json "$work/$side/$name" > "$work/$side/$name.json" 2>/dev/null || true
    done
    n=$((n + 1))
    if ! diff -r -q "$work/old/$name" "$work/new/$name" > /dev/null \
        || ! cmp -s "$work/old/$name.json" "$work/new/$name.json" \
        || ! cmp -s "$work/old/$name.out" "$work/new/$name.out"; then
        echo "differs: $name"
        diff -r "$work/old/$name" "$work/new/$name" | head -5 || true
        differ=$((differ + 1))
    fi
done
echo "$n records re-summarized; $differ differ"
[ "$differ" -eq 0 ]
