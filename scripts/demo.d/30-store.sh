# Part of scripts/demo.sh (sourced): the store through the router.
step "Commit a few hundred executions through the router (PgBouncer per shard) and show how they spread"
"$bin" store demo --config "$cfg" --executions 300
