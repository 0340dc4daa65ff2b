# Part of scripts/demo.sh (sourced): a short capacity run through the proxy.
step "loadgen: 10 s of the store's hot path (load, CAS commit, outbox relay, timers) through the proxy"
"$bin" loadgen run --config "$cfg" --profile configs/loadgen-demo.yaml --dsn "$pdsn" --quiet
printf '\nOpen the report: %s\n' "$(pwd)/loadgen-out/demo/report.html"
