# Part of scripts/demo.sh (sourced): a short chaos run, verified.
step "chaos: 15 s of lost acks, terminations, resets, a shard crash, a PgBouncer kill and proxy restarts — then the verifier's verdict"
"$bin" chaos run --config "$cfg" --scenario configs/chaos/demo.yaml --out chaos-out/demo --quiet
printf '\nOpen the report: %s\n' "$(pwd)/chaos-out/demo/report.html"
