#!/usr/bin/env bash
# The host services from a plugin's table() (plugin.h: the services given to create() stay valid until
# destroy(), so a plugin keeps the pointer and calls svc->log / svc->error from any hook). The plugin is
# tests/plugins/svclog.c: table() logs every call at INFO and refuses more than `limit` distances with
# svc->error. The log line reaches stderr, prefixed with the plugin's name (INFO is shown by default: the
# CLI has no verbosity flag; only sweep and report lower it to warnings); the refusal's message reaches the
# user with the term, the plugin, its file and the hook, through `biaskit bias` and `biaskit train`.
# usage: test_plugin_services.sh <biaskit binary> <test plugin dir>
set -u
bk=$1 testplugins=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
export BIASKIT_PLUGIN_PATH=$testplugins

printf '[model]\nlayers = 1\nheads = 2\ndim = 16\nvocab = 256\n[train]\nlength = 16\nbatch = 2\nsteps = 2\nwarmup = 1\n'\
'log_every = 1\neval_every = 0\neval_batches = 1\n[data]\npaths = ["corpus"]\n[run]\ndevice = "cpu"\n'\
'[[term]]\nplugin = "svclog"\nlimit = 32\n' >"$work/svc.toml"
mkdir -p "$work/corpus" && head -c 20000 /dev/urandom | base64 >"$work/corpus/text.txt"

check "bias: table()'s svc->log line, at INFO, with the plugin's name" 0 \
    '^biaskit: info: plugin svclog: table\(\) asked for 8 distances$' "$bk" bias "$work/svc.toml" --length 8
check "bias: within the limit, the table" 0 '^ +3 +-1\.5 +-1\.5$' "$bk" bias "$work/svc.toml" --length 8
check "bias: table()'s svc->error message, with term, plugin and hook" 1 \
    "^biaskit: error: term 'svclog' \(plugin svclog, [^)]*biaskit_svclog\.so\) at layer 0: table\(\) failed: svclog refuses 40 distances: its option limit is 32$" \
    "$bk" bias "$work/svc.toml" --length 40
check "bias: the log line comes before the refusal" 1 'asked for 40 distances' "$bk" bias "$work/svc.toml" --length 40
check "train: within the limit, trains and logs from table()" 0 \
    'biaskit: info: plugin svclog: table\(\) asked for 16 distances' \
    "$bk" train "$work/svc.toml" --out "$work/ok" --plain
check "train: beyond the limit, the plugin's message" 1 \
    "table\(\) failed: svclog refuses 16 distances: its option limit is 8" \
    "$bk" train "$work/svc.toml" --set term.0.limit=8 --out "$work/refused" --plain

echo "test_plugin_services: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
