package route

import (
	_ "embed"
	"strings"
)

// sessionFuncs are built-in functions whose effect outlives the transaction
// on the server connection: behind a transaction pooler the next client of
// that connection would inherit it, so they are refused.
var sessionFuncs = map[string]string{
	"pg_advisory_lock":            "pg_advisory_lock takes a session-level advisory lock, which would stay held on a pooled server connection; use pg_advisory_xact_lock",
	"pg_advisory_lock_shared":     "pg_advisory_lock_shared takes a session-level advisory lock; use pg_advisory_xact_lock_shared",
	"pg_try_advisory_lock":        "pg_try_advisory_lock takes a session-level advisory lock; use pg_try_advisory_xact_lock",
	"pg_try_advisory_lock_shared": "pg_try_advisory_lock_shared takes a session-level advisory lock; use pg_try_advisory_xact_lock_shared",
	"pg_advisory_unlock":          "pg_advisory_unlock releases a session-level advisory lock, which cannot be held through pgshard",
	"pg_advisory_unlock_shared":   "pg_advisory_unlock_shared releases a session-level advisory lock, which cannot be held through pgshard",
	"pg_advisory_unlock_all":      "pg_advisory_unlock_all releases session-level advisory locks, which cannot be held through pgshard",
	"dblink_connect":              "dblink_connect opens a connection that outlives the transaction",
}

// sessionFuncState names the session state each of sessionFuncs keeps
// (Statement.SessionState).
var sessionFuncState = map[string]string{
	"pg_advisory_lock": "advisory-lock", "pg_advisory_lock_shared": "advisory-lock",
	"pg_try_advisory_lock": "advisory-lock", "pg_try_advisory_lock_shared": "advisory-lock",
	"pg_advisory_unlock": "advisory-lock", "pg_advisory_unlock_shared": "advisory-lock",
	"pg_advisory_unlock_all": "advisory-lock", "dblink_connect": "dblink",
}

// objectCatalogs are the system catalogs and views that list schema
// objects (tables, columns, indexes, types, functions, ...): what they
// answer depends on which objects the server holds, and only the default
// shard holds the unsharded ones (Statement.ReadsObjects). information_schema
// is all of that kind. Not here: the catalogs of a session's or a
// server's state (pg_locks, pg_stat_activity, pg_settings, pg_cursors,
// pg_prepared_statements, ...), which a transaction reads on its own
// backend.
var objectCatalogs = setOf(
	"pg_class", "pg_namespace", "pg_attribute", "pg_attrdef", "pg_index", "pg_constraint", "pg_type",
	"pg_proc", "pg_description", "pg_depend", "pg_inherits", "pg_trigger", "pg_rewrite", "pg_sequence",
	"pg_enum", "pg_range", "pg_operator", "pg_aggregate", "pg_am", "pg_opclass", "pg_collation",
	"pg_extension", "pg_policy", "pg_partitioned_table", "pg_statistic_ext", "pg_publication_rel",
	"pg_tables", "pg_views", "pg_indexes", "pg_sequences", "pg_matviews", "pg_policies", "pg_rules",
	"pg_stats", "pg_stat_user_tables", "pg_stat_all_tables", "pg_statio_user_tables",
)

// objectFuncs are built-in functions whose answer depends on which schema
// objects exist (a name looked up, an object's definition or size); all
// of them read only.
var objectFuncs = setOf(
	"to_regclass", "to_regtype", "to_regproc", "to_regprocedure", "to_regoper", "to_regoperator",
	"to_regnamespace", "to_regrole", "to_regcollation", "to_regtypemod",
	"pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size", "pg_relation_filenode",
	"pg_relation_filepath", "pg_get_viewdef", "pg_get_indexdef", "pg_get_constraintdef", "pg_get_triggerdef",
	"pg_get_functiondef", "pg_get_serial_sequence", "pg_table_is_visible", "pg_type_is_visible",
	"pg_function_is_visible", "has_table_privilege", "has_column_privilege", "has_sequence_privilege",
	"has_function_privilege", "has_any_column_privilege", "obj_description", "col_description",
	"format_type", "pg_get_expr",
)

// objectTypes are the OID alias types whose input looks a name up
// ('t'::regclass): a cast to one reads which objects exist.
var objectTypes = setOf("regclass", "regtype", "regproc", "regprocedure", "regoper", "regoperator", "regnamespace", "regcollation")

// aggregates are the built-in aggregate functions. A select list that uses
// them reads one group (or row) from every shard; only count, sum, min and
// max combine across shards.
var aggregates = setOf(
	"count", "sum", "min", "max", "avg", "array_agg", "string_agg", "json_agg", "jsonb_agg",
	"json_object_agg", "jsonb_object_agg", "json_agg_strict", "jsonb_agg_strict", "json_objectagg", "json_arrayagg",
	"bool_and", "bool_or", "every", "bit_and", "bit_or", "bit_xor", "stddev", "stddev_pop", "stddev_samp",
	"variance", "var_pop", "var_samp", "corr", "covar_pop", "covar_samp", "regr_avgx", "regr_avgy",
	"regr_count", "regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy",
	"percentile_cont", "percentile_disc", "mode", "xmlagg", "any_value", "range_agg", "range_intersect_agg",
)

//go:embed pg_builtin_functions.txt
var builtinFuncsText string

//go:embed pg_builtin_types.txt
var builtinTypesText string

// pgBuiltinType holds the names of PostgreSQL's own types (pg_catalog).
var pgBuiltinType = func() map[string]bool {
	m := map[string]bool{}
	for _, line := range strings.Split(builtinTypesText, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			m[line] = true
		}
	}
	return m
}()

// pgBuiltin holds the names of PostgreSQL's own functions (pg_catalog).
var pgBuiltin = func() map[string]bool {
	m := map[string]bool{}
	for _, line := range strings.Split(builtinFuncsText, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			m[line] = true
		}
	}
	return m
}()

// readOnlyFuncs are built-in functions that change no data: a key-less
// read that calls only these may fan out.
var readOnlyFuncs = setOf(
	// strings
	"length", "char_length", "character_length", "octet_length", "bit_length", "lower", "upper", "initcap",
	"substr", "substring", "position", "strpos", "trim", "btrim", "ltrim", "rtrim", "lpad", "rpad",
	"concat", "concat_ws", "format", "replace", "translate", "split_part", "left", "right", "reverse",
	"repeat", "starts_with", "md5", "sha224", "sha256", "sha384", "sha512", "encode", "decode",
	"regexp_replace", "regexp_match", "regexp_matches", "regexp_like", "regexp_count", "regexp_substr",
	"regexp_split_to_array", "regexp_split_to_table", "string_to_array", "array_to_string", "quote_ident",
	"quote_literal", "quote_nullable", "to_hex", "ascii", "chr", "overlay", "unistr", "normalize",
	"convert_from", "convert_to", "is_normalized", "pg_collation_for",
	// what the grammar makes of LIKE/ILIKE ... ESCAPE, SIMILAR TO and
	// OVERLAPS
	"like_escape", "similar_to_escape", "overlaps",
	// numbers
	"abs", "ceil", "ceiling", "floor", "round", "trunc", "mod", "div", "power", "pow", "sqrt", "cbrt", "exp",
	"ln", "log", "log10", "sign", "greatest", "least", "width_bucket", "gcd", "lcm", "random", "scale",
	"to_number", "to_char",
	// time
	"now", "statement_timestamp", "transaction_timestamp", "clock_timestamp", "timeofday", "date_part",
	"date_trunc", "date_bin", "extract", "age", "make_date", "make_time", "make_timestamp", "make_timestamptz",
	"make_interval", "to_timestamp", "to_date", "justify_days", "justify_hours", "justify_interval", "isfinite",
	"timezone",
	// json
	"to_json", "to_jsonb", "row_to_json", "array_to_json", "json_build_object", "jsonb_build_object",
	"json_build_array", "jsonb_build_array", "json_object", "jsonb_object", "json_extract_path",
	"jsonb_extract_path", "json_extract_path_text", "jsonb_extract_path_text", "json_array_length",
	"jsonb_array_length", "json_typeof", "jsonb_typeof", "json_each", "jsonb_each", "json_each_text",
	"jsonb_each_text", "json_array_elements", "jsonb_array_elements", "json_array_elements_text",
	"jsonb_array_elements_text", "json_object_keys", "jsonb_object_keys", "jsonb_set", "jsonb_insert",
	"jsonb_pretty", "jsonb_strip_nulls", "json_strip_nulls", "jsonb_path_query", "jsonb_path_exists",
	"jsonb_path_match", "jsonb_path_query_array", "jsonb_path_query_first",
	"json_to_record", "jsonb_to_record", "json_to_recordset", "jsonb_to_recordset",
	"json_populate_record", "jsonb_populate_record", "json_populate_recordset", "jsonb_populate_recordset",
	"cardinality", "array_length", "array_position", "array_positions", "unnest",
	// arrays and sets
	"array_length", "array_lower", "array_upper", "array_ndims", "array_dims", "cardinality", "array_append",
	"array_prepend", "array_cat", "array_position", "array_positions", "array_remove", "array_replace",
	"unnest", "generate_series", "generate_subscripts",
	// misc
	"coalesce", "nullif", "gen_random_uuid", "uuid_generate_v4", "hashtext", "hashtextextended",
	"hashint8extended", "current_setting", "version", "pg_backend_pid", "current_database",
	"current_schema", "current_user", "session_user", "pgshard_bucket", "pgshard_buckets",
	// the fence's read side (migration 0008): the store's scans filter by
	// pgshard_fence_served() on every shard, its keyed reads check the key
	"pgshard_fence_served", "pgshard_fence_check", "pgshard_fence_bucket", "pgshard_fence_nb",
	"pg_typeof", "num_nulls", "num_nonnulls",
	// window functions (read-only; the merge refuses them across shards)
	"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
	"first_value", "last_value", "nth_value",
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
