// Package route is the SQL analyzer and router of pgshard's proxy: it
// decides, per statement, which shard runs it — one shard, every shard
// (with a merge plan), any shard, or none (a refusal with a SQLSTATE).
//
//	query text ─► cache ─hit─► *Statement (kind, facts, plan)   Analyze / Split (statements.go, cache.go)
//	              │miss
//	              ├─ fast path (BEGIN/COMMIT/ROLLBACK, SET LOCAL pgshard.key): no parse (lex.go)
//	              ├─ literals? ─► normalized text ─► shape cache ─► shared plan + the text's literals
//	              │             (normalize.go, shape.go)
//	              └─ pg_query (Postgres's own grammar) ─► classify (classify.go)
//	                   ─► keyed references, groups, edges (analyze.go, scope.go, refgraph.go,
//	                      exprreader.go, coverage.go) ─► plan (keyplan.go)
//	                   ─► merge plan of a key-less read (mergeplan.go, selectlist.go, groupplan.go,
//	                      shardcolumns.go, valuesplit.go, setop.go) ─► hints (hint.go)
//	a read refused across shards ─► two-stage plan (twostage.go, an EXISTS
//	  decorrelated into an IN: decorrelate.go; a table read whole with
//	  its own WHERE terms: pushdown.go; once per text; planned again from
//	  a stage's 42703 for a column of the row: learn.go)
//	a per-shard text of a read of every shard ─► its served form: each keyed
//	  table read in the buckets the shard serves (served.go, once per text)
//	every tree the planner writes back as SQL (per-shard statements, stages,
//	  served forms) ─► pg_query's deparser with the parentheses it drops put
//	  back, the text proven to parse back to the tree (deparse.go)
//	*Statement + Bind params (input.go) ─► decode key params (value.go)
//	  ─► key → bucket → shard (placer.go) ─► shard sets (sset.go)
//	  ─► Dest (evaluator.go; explain.go records the steps)                Route (route.go)
//
//	table.go is Table, the routing table of one map and schema (New,
//	Analyze, Route, ...); the name is not Router, which would read as
//	package router, the store's router over all shards. It is a facade
//	over three parts: a placer (placer.go: where a key, a sequence value
//	or a shard name lives on the map; RouteKey, RouteShard and Bound are
//	its), statements (statements.go: what each text is — its analysis in
//	a bounded cache, the shapes of literal-normalized texts in a second
//	one; Analyze and Split are its), and an evaluator made per Route
//	(evaluator.go: one plan's groups evaluated under one input into a
//	Dest, with the steps for Explain). Per statement parsed, statements
//	makes a classifying (classify.go) that classifies it and finishes its
//	plan; per shape, a shape (shape.go) that binds each text's literals;
//	per read refused across shards, a stageBuilder (twostage.go) that
//	plans its two stages once, kept in the statement. Table.OnOwnSession
//	classifies a statement refused for the session state it keeps again,
//	as a pinned session's own server session runs it (classifying.own:
//	its rows route it), on demand and uncached.
//	types.go is the contract with the proxy (Statement, Dest, Merge);
//	schema.go the sharding schema; funcs.go the built-in function lists;
//	catalogs.go the names of pg_catalog's relations (one of them
//	unqualified is the system catalog; any other pg_ name a user's table);
//	setlocal.go the statements that only set transaction-local settings;
//	setconfig.go the one set_config(name, value, false) an engine may keep
//	as a session setting (Statement.SetConfig);
//	terminate.go the pg_terminate_backend / pg_cancel_backend calls the
//	engine answers for its sessions' PIDs; release.go the statements
//	that end a session state entirely (UNLISTEN *, CLOSE ALL,
//	pg_advisory_unlock_all). The engine recognizes no SQL of its own:
//	what it needs to know of a statement is a field of Statement.
//
//	analyze.go walks a statement's parse tree (analyzer: queries, FROM
//	items, DML, function calls); the parts it is made of own their state:
//	scope.go a query level's FROM items and what a name there is (scope),
//	refgraph.go the refs to keyed tables, their constraints and links
//	(refGraph), exprreader.go what an expression or condition says about
//	keys, read through literal slots (exprReader), coverage.go whether a
//	FROM's rows each come from one shard, with the VALUES list split by
//	shard (coverage). mergeplan.go plans a fan-out's merge (merger: rows,
//	ORDER BY, DISTINCT, LIMIT/OFFSET, the per-shard statement) over
//	selectlist.go (the top-level select list and how ORDER BY / GROUP BY
//	terms name its entries: selectList), groupplan.go (GROUP BY,
//	aggregates, HAVING over partial groups: groupPlan) and shardcolumns.go
//	(the per-shard columns the plan adds: shardColumns); setop.go a
//	top-level UNION [ALL] (its branches: setLeaf, and their merge);
//	copyrows.go a COPY (query) TO whose rows merge (its options,
//	CopyFormat).
//
// # Parsing and the cache
//
// Statements are parsed with github.com/pganalyze/pg_query_go, which is
// Postgres's parser, once per distinct text: a Table caches analyses in a
// bounded CLOCK cache (Options.CacheSize entries; a hit takes a read lock
// and sets an atomic flag, and allocates nothing). A text Postgres cannot
// parse is not an error here: it becomes a KindOther statement with
// ParseError set that routes DestAny, so the engine forwards it and the
// client receives Postgres's own error (SQLSTATE, position) unchanged.
//
// # Texts that differ only in their constants
//
// A client that inlines its values (the simple protocol: pgbench -M
// simple, psql scripts, ORMs without server-side binding) sends a new
// text for every query. Such a text is normalized instead of parsed: one
// pass of the lexer replaces its literal constants by placeholders
// numbered above any $n ($1048577, ...) and keeps their values. Texts
// with the same normalized text and the same classes of literals (string,
// integer ≥ 0, other number) share one analysis, cached in a second cache
// of the same size; the text itself gets a Statement that carries its own
// SQL, its literals and — when it has no $n — its decision, made at once
// and cached with the text, so that a repeated text costs one lookup.
//
// A placeholder is typed as the constant it replaces: a quoted string is
// unknown-typed (compared with an integer key it is read as an integer), an
// integer is int4 or int8, a decimal or a larger integer numeric, -5 is the
// constant -5 (the grammar folds the minus). Route converts the literal's
// value exactly as the analysis converts a constant (casts included), and
// renders it exactly as reasons render a constant: the decision — shard,
// key, bucket, reason, refusal, merge plan — is the one a full parse of the
// text gives, which the tests check over the routing corpus, variations of
// it with other values, and a fuzz target.
//
// Kept in the normalized text (the text shares its analysis only with
// texts that have the same constant there): constants in ORDER BY, GROUP
// BY and DISTINCT ON (positions, not values), in type modifiers
// (varchar(10), numeric(10,2), timestamp(3)) and EXTRACT(... FROM),
// typed literals (date '2024-01-01', interval '1' day, int8 '5': a string
// after a word that is not a keyword an expression follows; a cast
// '5'::int8 is normalized and keeps its cast), a number after a word that
// is not a reserved keyword (pg_query reads date $1 as a typed literal,
// date 1.5 is an error; after '.', even LIMIT is a name), -N where the
// minus may not be folded into it (x -5, - 5, -(5), -5::text), E'...',
// $$...$$, B'...', X'...', N'...', a string that is not valid UTF-8 (the
// parser rejects it), numbers in any form but plain decimals (1.5e3, 0x1F,
// 1_000), a constant followed by . or [ (pg_query reads $1.f, not 'x'.f),
// and every constant of a statement that is not SELECT / INSERT / UPDATE /
// DELETE / WITH / VALUES / CALL (SET x = 5, DDL, COPY options, EXPLAIN,
// PREPARE, EXECUTE). Hints are comments: they stay as they are. TRUE,
// FALSE and NULL are keywords.
//
// Analyzed in full, text by text (as without normalization): texts the
// lexer cannot follow (a U&'...' string or U&"..." identifier, a string
// continued on the next line, a string right after ')', unbalanced
// parentheses, a $n above 1048576, an unterminated token), texts whose
// normalized text does not parse, and shapes whose analysis would depend
// on a literal's value beyond its use as a key: a literal rendered into a
// reason, refusal or per-shard SQL (found by walking every string of the
// analysis), a literal LIMIT/OFFSET that is not a plain integer, a literal
// compared as an expression (ORDER BY an expression equal to a select-list
// entry), compared by the merge (HAVING) or deciding a statement's kind
// (set_config(..., 'false')). A key-less read whose per-shard SQL is
// rewritten (LIMIT n+m, hidden columns, merged groups) and holds a literal
// is analyzed in full when it fans out. Options.KeepLiterals turns
// normalization off.
//
// # Where keys come from
//
// The sharding Schema names keyed tables (column and key type: text, int8,
// or seq for the strided global sequences) and keyed function arguments
// (harel_commit_cas's first). Analyze finds, once per text, every place a
// key value enters the statement — a constant (evaluated then) or a $n
// (decoded at Route) — in:
//
//   - WHERE / JOIN ON equality on a key column, through AND chains, IN
//     lists, = ANY(ARRAY[...]), row comparisons, and OR when every arm
//     constrains the same table;
//   - INSERT column lists (or the configured column position) with VALUES
//     rows, INSERT ... SELECT (a constant, a parameter or a copied key
//     column), ON CONFLICT DO UPDATE SET key = ...;
//   - UPDATE SET key = value (the row must stay on the statement's shard);
//   - keyed function arguments anywhere in the statement;
//   - subqueries and CTEs (including data-modifying ones) — every keyed
//     reference of a statement must agree on one shard;
//   - casts of constants and parameters ($1::text, CAST($1 AS int8),
//     42::text, '42'::int8).
//
// Tables are matched by name with any schema qualifier (public.executions
// is executions); quoted names are exact ("Executions" is another table).
// An unqualified column that might belong to a table whose columns are
// unknown is not treated as a key: the router never guesses.
//
// A parameter's type is the type the client declared in Parse (a cast in
// the SQL then converts it, as the server does), else the type of the
// cast applied to it, else the key column's type. This is how Postgres
// types parameters; the order (cast first) would decode a value
// declared int8 and written $1::text as raw text, which the server does not.
// Parameters are decoded in text and binary format: text, varchar, bpchar
// (trailing blanks dropped, as when compared with text), name and unknown
// as bytes; int2/int4/int8 big-endian; uuid as 16 bytes, rendered as the
// server's uuid::text does (lowercase, dashed). The store's execution ids
// are 32 lowercase hex digits without dashes stored as text, so a uuid-typed
// parameter never equals one: it routes by the dashed text the server
// would compare, and finds nothing there, exactly as it would on one
// database. A binary value of the wrong length is refused with 22P03, text
// that is not a valid integer or uuid with 22P02, like the server does.
// A NULL key matches no row (the statement may run anywhere, DestAny) in a
// condition; as an inserted or assigned key it is refused (23502).
//
// # Deciding
//
// Keyed references whose keys are equal (joined on the key by an inner
// join or WHERE) form a group; a group's shard set is the intersection of
// its conditions (AND), unions for OR/IN. A reference on the nullable side
// of an outer join, or inside a correlated subquery, needs only the rows
// that join the other side, so its set is narrowed by that side's.
//
//   - Every group on one shard, the same one: DestShard.
//   - Groups on different shards: refused, SQLSTATE 0A000, naming both keys
//     and shards — never a silent misroute.
//   - No group needs a shard (no keyed table; a NULL or contradictory key;
//     a new outbox row, whose seq the inserting shard generates): DestAny.
//   - Some group needs several shards (no key, or IN keys on several
//     shards): a write (or FOR UPDATE, or a keyed function) is refused; a
//     read fans out (DestAll) if all keyed tables are joined on their keys
//     and the result can be merged (Merge), and is refused otherwise.
//
// DDL and other utility statements without a key run on every shard
// (KindDDL, DestAll, Merge nil).
//
// # Fan-out merges
//
// A key-less read fans out (DestAll) with a Merge that says how the engine
// combines the shards' answers; mergePlan (mergeplan.go) decides from the
// parse tree, with a whitelist of the shapes whose merge is provably the
// answer of one database, and refuses every other shape with 0A000 and the
// reason. Merged:
//
//   - rows: plain reads (concatenated); ORDER BY select-list columns (by
//     position, output name or equal expression) or any other expression
//     of the input columns (sent to the shards as hidden trailing columns),
//     k-way merged, with ASC/DESC, NULLS FIRST/LAST and COLLATE "C";
//     LIMIT/OFFSET (each shard gets LIMIT n+m computed in 64 bits,
//     saturating to LIMIT ALL, and no OFFSET; a parameter's n+m is computed
//     by the shard; a negative constant is left for the shards to reject as
//     Postgres does, a negative parameter refused with 2201W / 2201X);
//     GROUP BY or DISTINCT that include a sharding key of a table that is
//     not on the nullable side of an outer join (each group lives on one
//     shard); DISTINCT without a key (every shard sorts by every column,
//     the merge drops duplicates);
//   - groups: aggregates count, sum, min, max and avg (as sum and count),
//     count/sum(DISTINCT key) (additive: a key's rows are on one shard),
//     min/max(DISTINCT x), count(DISTINCT x) of any other x and
//     string_agg(x, 'sep' ORDER BY x) (from the shards' arrays of values,
//     below), FILTER (WHERE ...), each possibly under one cast
//     to int2, int4, int8, numeric, float4, float8 or text; GROUP BY any
//     expressions, positions or output names (hidden key columns every shard
//     sorts by, merged group by group); HAVING of comparisons (=, <>, <, <=,
//     >, >=, IS [NOT] NULL, AND, OR, NOT) of merged aggregates, group keys,
//     constants and parameters; ORDER BY of merged columns (streamed when it
//     orders by group keys, else sorted after the merge); LIMIT and OFFSET
//     after the merge.
//
// Refused: window functions (unless PARTITION BY a sharding key), set
// operations, DISTINCT ON (unless on a sharding key), GROUPING SETS,
// FETCH ... WITH TIES with a parameter count or over aggregates (with
// constant counts over rows the shards send every row and the merge keeps
// the ties), ORDER BY ... USING, a collation other than C in
// ORDER BY, other aggregates (array_agg, stddev, string_agg not ordered
// by its own value or with a separator that is not a string constant,
// sum/avg(DISTINCT x) of a non-key, ...) and
// expressions of aggregates (sum(x)/count(x), coalesce(max(x), 0)), a
// function not known to be read-only, FOR UPDATE, a join of keyed tables not
// on their keys, rows not covered by a keyed table (the rule below), and
// any subquery, CTE or derived table whose result needs every
// shard's rows at once (LIMIT, OFFSET, FETCH, DISTINCT ON, window
// functions, aggregates or GROUP BY not by a key of its own tables): its
// rows are linked to no other reference by their key, so the statement
// (keyed or not) is refused unless the subquery is correlated by the key.
// Merge.Describe renders a plan step by step (pgshard route prints it).
//
// # The fan-out rule: every row from exactly one shard
//
// A fan-out concatenates (or merges) what each shard answers over its own
// rows, so it is the answer of one database only when every row of the
// answer is produced by exactly one shard. The analyzer proves that from
// the parse tree and refuses (0A000, naming the part that breaks it)
// every shape where it cannot:
//
//  1. Coverage: every row the top-level FROM produces contains a row of a
//     keyed table (that row's shard is the row's only shard). A keyed
//     table covers its rows; an inner or cross join is covered when
//     either side is; A LEFT JOIN B when A is; A RIGHT JOIN B when B is;
//     A FULL JOIN B when both are; a FROM list when any item is. VALUES,
//     functions (generate_series, unnest, jsonb_to_record), global tables
//     and catalogs cover nothing — their rows are the same on every shard,
//     so they may join covered rows, but never stand alone in a row.
//     One exception is covered by splitting: a VALUES list on the
//     preserved side of the statement's one outer join (LEFT, RIGHT or
//     FULL) whose condition equates a column of the list — string
//     constants or NULL — with the text sharding key of the keyed table on
//     the other side is sent to each shard with only the rows whose key
//     that shard owns (a NULL key to the first shard), as if it were a
//     keyed table: a row's matches all have its key, so they live on its
//     key's shard, which alone produces it (valuesplit.go; Merge.ShardSQL).
//     The rule is coverage.go's.
//  2. Co-location: every keyed table the statement reads is joined to the
//     others by equality of the sharding keys (executions.id,
//     timers/trace/processed_events.execution_id, spawns.parent_id) —
//     in ON, WHERE, USING, EXISTS / IN (semi- and anti-joins), through a
//     derived table's or CTE's column — so every pair of rows that meet
//     is on one shard. A join on data (outbox.target_id, spawns.child_id,
//     data::jsonb->>'parent_id', any non-key column) crosses shards.
//     The links are refgraph.go's.
//  3. Derived tables and CTEs read in FROM count as keyed when each of
//     their rows comes from one shard: their own FROM is covered, and they
//     have no LIMIT/OFFSET/FETCH, DISTINCT ON, DISTINCT, aggregates or
//     GROUP BY unless by a key of their own (non-nullable) tables, window
//     functions unless PARTITION BY such a key, set operations, or
//     recursion; a CTE over keyed tables is read at most once. A LATERAL
//     subquery whose keyed tables are each tied by the sharding key to a
//     keyed table of the FROM it joins (WHERE t.execution_id = e.id) may
//     have any of these: it runs once per row of that table, over the
//     rows of that row's shard only (coverage.tiedToRow).
//  4. Subqueries elsewhere (select list, WHERE) over keyed tables either
//     correlate by the key or are refused when their result needs every
//     shard's rows (an uncorrelated count(*), min, LIMIT, ...).
//  5. Tables outside the sharding schema live on the default shard only:
//     a statement that reads one never fans out.
//  6. The top-level merge is one of the whitelisted shapes above (ORDER
//     BY, LIMIT/OFFSET, DISTINCT, aggregates, GROUP BY / HAVING, DISTINCT
//     ON a sharding key, window functions PARTITION BY a sharding key).
//     The merged aggregates are count, sum, avg, min, max, and bool_and /
//     every (the least of the shards' values: false < true) and bool_or
//     (the greatest); a shard without rows answers NULL, which the merge
//     skips. sum and avg of intervals merge too (added field by field as
//     interval_pl adds them; avg divides as interval_div does), written in
//     the IntervalStyle each shard reports in a hidden column
//     (GroupMerge.StyleColumn, as extra_float_digits in DigitsColumn).
//     count/sum/avg(DISTINCT x) merge (as sums) only when x is a
//     key column of a keyed table — also an outer join's nullable side or
//     through a derived table or CTE: a non-NULL value is on one shard.
//     DISTINCT ON expressions without a sharding key merge when they are
//     the leading ORDER BY terms and in the select list: each shard sends
//     its first row of each group, the k-way merge meets a group's rows
//     together in the ORDER BY order and keeps the first (the shards keep
//     LIMIT + OFFSET groups each); without ORDER BY the row is arbitrary.
//     FETCH ... WITH TIES applies after the merge, to rows or to merged
//     groups (the groups tying with the last one on every ORDER BY term
//     follow), never together with DISTINCT.
//     Aggregates merged from the shards' arrays of values (issue 18):
//     count(DISTINCT x) of an x that is not a sharding key — each shard
//     sends array_agg(DISTINCT x) [FILTER ...] in binary, the merge counts
//     the distinct non-NULL values of the union, equal as Postgres
//     compares them (numbers by value, -0 = 0, NaN = NaN, bpchar without
//     trailing blanks, text by bytes); and string_agg([DISTINCT] x,
//     'sep' ORDER BY x [COLLATE "C"] [ASC|DESC]) — ordered by its own
//     value, so that values equal in the order are the same text and their
//     order among themselves does not show; each shard sends array_agg(
//     [DISTINCT] x ORDER BY x), the merge orders the union's non-NULL
//     values (dropping equal ones for DISTINCT), joins them with the
//     constant separator, NULL when there are none. Text compares by bytes
//     only: the shards' collation is C (checked at run time) or the ORDER
//     BY says COLLATE "C"; otherwise, and for values whose type the merge
//     cannot compare (jsonb, arrays, ...) or string_agg of a value that is
//     not text, varchar or bpchar, the statement is refused at run time
//     with 0A000. A group's values are held in memory, as the answer holds
//     them (string_agg) or as one shard's row does (count).
//  7. A top-level UNION ALL fans out when each of its branches is a read
//     that rules 1–5 would concatenate on its own (rows each from one
//     shard, no aggregate, DISTINCT or LIMIT over every shard's rows) and
//     every set operation under it is a UNION ALL: the shards' answers
//     concatenated are the one database's. A top-level UNION (distinct)
//     over such branches (UNION or UNION ALL under it) is merged as
//     SELECT DISTINCT: each shard sorts by every column, the merge drops
//     duplicates that meet. ORDER BY result columns and LIMIT/OFFSET are
//     merged as a plain read's. The branches are not joined to each
//     other, so co-location (rule 2) holds within each branch; branches
//     keyed to different shards fan out too (setop.go). INTERSECT and
//     EXCEPT are not merged (a row's fate depends on other shards' rows):
//     they are answered in two stages (below).
//
// Answered (fan-out): SELECT e.id, t.path FROM executions e LEFT JOIN
// timers t ON t.execution_id = e.id ORDER BY e.id LIMIT 10; SELECT
// count(*) FROM executions e WHERE NOT EXISTS (SELECT 1 FROM trace r
// WHERE r.execution_id = e.id); SELECT e.id, v.w FROM executions e JOIN
// (VALUES ('a', 1)) v(k, w) ON v.k = e.definition_id; WITH c AS (SELECT
// execution_id, count(*) n FROM timers GROUP BY execution_id) SELECT e.id,
// c.n FROM executions e JOIN c ON c.execution_id = e.id; SELECT
// execution_id, row_number() OVER (PARTITION BY execution_id ORDER BY idx)
// FROM trace; SELECT DISTINCT ON (execution_id) execution_id, path FROM
// timers ORDER BY execution_id, fire_at; SELECT definition_id,
// bool_and(version > 1), bool_or(version > 3) FROM executions GROUP BY
// definition_id; SELECT DISTINCT ON (definition_id) definition_id, id
// FROM executions ORDER BY definition_id, version DESC, id LIMIT 5;
// SELECT definition_id, count(*) FROM executions GROUP BY definition_id
// ORDER BY count(*) DESC FETCH FIRST 2 ROWS WITH TIES; SELECT
// count(DISTINCT definition_id), string_agg(DISTINCT definition_id, ','
// ORDER BY definition_id) FROM executions; SELECT e.version,
// v.w FROM (VALUES ('id1', 0), ('id2', 1)) v(k, w) LEFT JOIN executions e
// ON e.id = v.k (split: each shard gets the rows of its keys); SELECT v.k,
// count(t.path) FROM (VALUES ('id1'), ('id2')) v(k) FULL JOIN timers t ON
// t.execution_id = v.k GROUP BY v.k.
//
// COPY ... TO STDOUT of a sharded table is analysed as SELECT * FROM the
// table, COPY (query) TO STDOUT as its query; either fans out when the
// read does and its merge is the shards' rows as they come (no ORDER BY,
// LIMIT, DISTINCT, aggregate or per-shard text): Merge.CopyOut, every
// shard's COPY output in turn (copyPlan; the engine makes them one COPY).
// When its rows need a merge, the shards run the query as a read
// (Merge.SQL) and the engine writes the merged rows as the COPY in the
// format and with the options it names (CopyOut.Rows; copyrows.go reads
// the options, refusing those it cannot write exactly).
//
// # Reads in two stages
//
// A read-only SELECT that the rules above refuse only because it needs
// several shards' rows at once ("cannot run across shards", "cannot merge
// a key-less read across shards") is answered in two stages when every
// sharded table it reads can be taken out as a statement of its own
// (twostage.go; the engine's side is proxy/internal/engine/twostage.go):
//
//   - a subquery of the WHERE, HAVING or select list of a SELECT with
//     FROM that reads a sharded table and qualifies no column by a
//     relation it does not have (correlated) becomes an inner statement,
//     as written (an EXISTS reads one row: LIMIT 1; an IN, ANY, ALL or
//     ARRAY subquery without LIMIT gets LIMIT PullLimit+1, so that every
//     shard stops where stage 1 would refuse the rows anyway); an EXISTS tied to
//     the row by one equality of qualified columns, b.k = a.x, with no
//     other reference to the row and a select list of constants and
//     columns, first becomes COALESCE(a.x IN (SELECT
//     DISTINCT b.k FROM ... WHERE the rest), false) — the same truth
//     value for every row and NULL (decorrelate.go) — whose subquery does
//     not refer to the row. When only such subqueries are inner (the
//     spread plan, tried first), the statement keeps its FROM, and stage
//     2 is routed as any read: its key's shard, or every shard merged;
//   - else a FROM subquery (not LATERAL) or a CTE (not recursive) that
//     reads a sharded table becomes an inner statement, as written;
//   - a sharded table in the top-level FROM (a join item too) becomes the
//     inner statement SELECT * FROM t LIMIT PullLimit+1, read under the
//     table's name or alias, with the terms of its SELECT's WHERE that
//     name only that table copied into it where that is exact
//     (pushdown.go: SELECT * FROM executions a WHERE a.version > $1
//     LIMIT 10001; never a table on the nullable side of an outer
//     join), and so are the ON terms of a join that name one of its
//     tables where the join drops that table's rows failing them (an
//     inner join's sides, an outer join's nullable side);
//   - each branch of a top-level set operation (one rule 7 does not
//     merge: INTERSECT, EXCEPT, a branch with aggregates or LIMIT) that
//     reads a sharded table becomes an inner statement, as written;
//   - a subquery that refers to the row around it off the keys (in
//     WHERE, the select list or a LATERAL subquery; other than the EXISTS
//     above, or one a 42703 showed it names the row's column without a
//     qualifier: the engine asks RouteApart for this plan then) is taken
//     apart by the correlated plan, tried after the deep one: its tables
//     are read first (Stages.Correlated marks them), and stage 2 runs it
//     once per row over their rows. Those have no index there, so the
//     engine refuses the read (54000) when the rows read for it times
//     the other rows read (+1) exceed CorrelatedBudget;
//   - where such an inner statement is no read pgshard answers alone (a
//     join off the keys, a window or LIMIT over one, a CTE of the
//     statement read inside it), the deep plan, tried last, takes it
//     apart instead: it stays in the outer statement, on the default
//     shard, with its own sharded tables and parts taken out the same
//     way (SELECT d.n FROM (SELECT x.id, count(*) AS n FROM executions x
//     JOIN outbox y ON y.target_id = x.id GROUP BY x.id) d: both tables
//     read first, the join and the grouping on the default shard);
//   - a subquery of a SELECT without FROM that reads a sharded table
//     becomes an inner statement (nothing there can correlate it);
//   - unsharded tables (on the default shard alone): a read of every
//     shard that also reads one ("... which is not sharded and lives on
//     the default shard only"), or a keyed read of another shard than
//     the default one (Options.DefaultShard) that does ("one shard
//     cannot read both"; Dest.OnKeyShard keeps its key's decision for a
//     pinned session whose temporary tables they are), is tried in two
//     stages too: in the spread plan a subquery reading an unsharded
//     table is an inner statement (stage 1 reads it on the default
//     shard), and so is an unsharded table of its FROM, read whole (SELECT
//     * FROM t LIMIT PullLimit+1, under its name or alias); an outer or
//     inner statement that still reads one runs only there (DestAny) —
//     else refused; a spread plan refused for the parameters it is given
//     falls back to the other plan (Stages.alt); without the spread plan the
//     unsharded tables stay in the outer statement, on the default
//     shard, and so does a subquery, CTE or set operation's branch that
//     reads one beside a sharded table, with its own sharded parts taken
//     out as above (for a keyed read only where each sharded table read
//     first is read on its key's shard, its key pushed into it: never
//     whole); so is a read whose keys name two shards (SELECT ... FROM
//     executions e, timers t WHERE e.id = $1 AND t.execution_id = $2:
//     each table read on its key's shard, the join on the default one);
//   - stage 1 runs each inner statement with the client's parameters as
//     Route decides for it alone (merged from every shard, or on its one
//     shard; refused → the whole statement keeps its refusal) and keeps
//     its merged rows, at most PullLimit rows (54000 beyond); an inner
//     statement that fails alone for a column or relation it does not
//     have (42703, 42P01: it names a column of the row without a
//     qualifier) is refused as a correlated subquery (0A000);
//   - stage 2 runs the rest (Stages.Outer) — on the default shard, or
//     for the spread plan where Route sends it — each
//     inner replaced by (SELECT * FROM (VALUES ($n, ...), ...) AS
//     pgshard_v(columns)) — parameters of the rows' type OIDs, in binary
//     — so Postgres itself evaluates windows, aggregates, joins, ORDER BY,
//     LIMIT over them; an empty result is the same list of NULLs WHERE
//     false; a column with a type modifier (varchar(12), numeric(8,2),
//     timestamp(3)) is cast back to it. The answer's columns must be the
//     statement's (names, types, type modifiers, else 0A000 before any
//     row, on one shard or merged from every shard); their originating
//     table columns are the statement's, from a Describe of it.
//
// Without the spread plan the outer statement must read no sharded table
// itself. Not in two stages (the refusal stands): a sharded table in an
// ORDER BY or GROUP BY subquery; a part whose taking apart leaves a
// sharded table in the outer statement (a FROM function over one, a
// table named by its schema without an alias); recursive
// CTEs; COLLATE or a system column (ctid, xmin, tableoid, ...) anywhere
// in the text; an answer that depends on the order rows are read in,
// which stage 1 does not keep (string_agg, array_agg, json_agg, ...
// without ORDER BY; row_number, ntile, lag, lead, first/last/nth_value
// or a window frame in a window without ORDER BY; DISTINCT ON in a
// SELECT without ORDER BY — with an ORDER BY, the order of the rows it
// ties is Postgres's choice on one database too, and stage 2's is one
// of its answers); FETCH ... WITH TIES over min and max of one table
// without GROUP BY (one database may fail it with 21000, its min/max
// read by an index, where stage 2's VALUES list has none); a column
// with a type modifier pgshard cannot write (interval's fields);
// writes, FOR UPDATE; inside a transaction block that is not READ
// COMMITTED or has written, or behind settings in the same pipeline
// inside one (the stages run outside the block: the engine decides,
// twostage.go); more than 65535 parameters in stage 2. The stages are
// separate transactions (no snapshot across shards, as for every
// fan-out); transaction-local settings — the block's SET LOCALs, or
// settings ahead of the read in its implicit transaction — run first
// in each of them.
//
// Answered in two stages: SELECT d.id, rank() OVER (ORDER BY d.id)
// FROM (SELECT id FROM executions ORDER BY id LIMIT 3) d; WITH c AS
// (SELECT count(*) AS n FROM timers) SELECT n + 1 FROM c; SELECT id,
// rank() OVER (ORDER BY version) FROM executions; SELECT a.id FROM
// executions a JOIN outbox b ON b.target_id = a.id; SELECT e.version FROM
// generate_series(0, 3) v(w) LEFT JOIN executions e ON e.version = v.w;
// SELECT id FROM executions INTERSECT SELECT execution_id FROM timers;
// SELECT e.id FROM executions e WHERE e.id IN (SELECT target_id FROM
// outbox LIMIT 3) (spread: stage 2 fans out); SELECT a.seq FROM outbox a
// WHERE NOT EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id)
// (decorrelated, spread); SELECT (SELECT count(*) FROM executions) + d.n
// FROM (SELECT count(*) AS n FROM timers) d. Still refused: SELECT * FROM
// executions e, LATERAL (SELECT count(*) FROM timers t WHERE t.fire_at >
// e.version) x; SELECT a.id FROM executions a WHERE a.version > (SELECT
// count(*) FROM timers t WHERE t.path = a.data); WITH c AS (SELECT 1 AS
// one) SELECT * FROM (SELECT id FROM executions, c LIMIT 2) d.
//
// Refused: SELECT e.version, v.w FROM (VALUES ('id1', 0)) v(k, w) LEFT
// JOIN executions e ON e.definition_id = v.k (not on the key: a VALUES
// row without a match would come from every shard); SELECT e.version
// FROM (VALUES (lower('ID1'))) v(k) LEFT JOIN executions e ON e.id = v.k
// (a computed key the proxy does not evaluate); SELECT g, t.path FROM
// generate_series(1, 3) g FULL JOIN timers t ON ...; SELECT s.seq, e.id FROM spawns s JOIN
// executions e ON e.id = s.child_id (the child lives elsewhere); SELECT
// o.seq FROM outbox o JOIN executions e ON e.id = o.target_id; SELECT
// count(*) FROM (SELECT DISTINCT definition_id FROM executions) d; SELECT
// id, (SELECT count(*) FROM trace) FROM executions; SELECT id FROM
// executions UNION ALL SELECT 'x' (a row of no shard); SELECT
// row_number() OVER (ORDER BY id) FROM executions (both answered in two
// stages, below).
//
// Merged (rule 7): SELECT id FROM executions UNION SELECT execution_id
// FROM timers ORDER BY 1 LIMIT 10; SELECT e.id, t.path FROM executions e
// JOIN timers t ON t.execution_id = e.id UNION ALL SELECT parent_id,
// root_path FROM spawns.
//
// proxy.TestFuzzSQL checks the rule with random queries against one plain
// Postgres (make fuzz-sql SEEDS=... for long runs).

// # Hints
//
// Hints need no parsing of the statement itself and override the SQL's
// keys; a hint that contradicts a key the SQL gives is refused (0A000):
//
//   - /* pgshard:key=VALUE */ anywhere in the text (in a block comment whose
//     body starts with "pgshard:"; VALUE bare or quoted '...' / "..."), the
//     first one wins. Its type is the placement key type of the statement's
//     first keyed table, else Schema.HintType.
//   - /* pgshard:shard=NAME */ names a shard (an operator's tool); an
//     unknown name is refused with 42704. Several directives may share one
//     comment; an unknown directive is refused with 42601.
//   - SET LOCAL pgshard.key = '...' is KindSetLocal with SetName
//     "pgshard.key": the engine routes the transaction with RouteKey (or
//     Route, which does the same) and never sends it to a shard. A session
//     SET pgshard.key and other pgshard.* settings are KindUnsupported.
//
// # Unsharded tables
//
// A table that is neither keyed nor global in the Schema is unsharded: it
// lives on the database's default shard (Statement.Unsharded names them).
// A statement that touches only unsharded objects — reads, writes, DDL of
// those tables, COPY into them, DO blocks, CALL of a procedure and calls
// of functions the schema does not know — routes DestAny with
// Dest.Default set: the engine runs it on the default shard. DDL that
// names keyed or global tables, or no table (CREATE FUNCTION, TYPE,
// EXTENSION), runs on every shard. Writes to global tables and catalogs
// stay refused unless hinted. CREATE TABLE ... AS of sharded rows is
// refused; of unsharded data it runs on the default shard.
//
// # Behind a transaction pooler
//
// Session state cannot survive on a pooled server connection. KindUnsupported
// (refused with 0A000 and a reason, and Statement.SessionState naming the
// state, so that an engine that pins the client to one server session can
// run it there instead): LISTEN; session advisory locks
// (pg_advisory_lock and friends; the _xact_ forms are fine);
// set_config(..., false); DECLARE ... WITH HOLD; CREATE TEMP TABLE / VIEW /
// SEQUENCE without ON COMMIT DROP (with it, the table lives inside one
// transaction, which is fine); SET SESSION AUTHORIZATION (replaying it per
// transaction would need superuser on the pooled connection: connect as
// that user); PREPARE TRANSACTION / COMMIT PREPARED / ROLLBACK PREPARED (a
// prepared transaction must be finished on the shard that holds it); LOAD.
// Allowed: NOTIFY and pg_notify (transactional, delivered at commit to
// listeners on the transaction's shard), UNLISTEN (a no-op), cursors
// without HOLD, SET LOCAL, and session SET/RESET, which are KindSetSession
// with SetName, SetValue and SetLocalSQL, so the engine can keep them and
// replay them as SET LOCAL in each transaction. SET TIME ZONE is named
// "timezone", as SHOW names it.
//
// A statement that only sets transaction-local settings — SELECT
// set_config(name, value, true) [, ...] and nothing else, the name a
// constant that is not a transaction characteristic, a pgshard setting or
// session_authorization, the value a constant or a parameter (setlocal.go)
// — carries them in Statement.Settings and is read-only: the engine may
// run it on every shard ahead of a read of every shard in its implicit
// transaction, and repeat it on a transaction's other backends.
//
// A statement that is nothing but SELECT set_config(name, value, false)
// — one call, the name a plain constant the proxy may keep, the value a
// constant or a parameter (setconfig.go) — stays KindUnsupported with
// SessionState "set-config" and carries the setting in
// Statement.SetConfig: an engine that keeps session settings may keep it
// as it keeps SET name = value, and answer the call's row, rather than
// pin the session.
//
// # Cost
//
// Route is the hot path: a cached Analyze plus Route of a point SELECT by
// $1 costs about half a microsecond and no allocation
// (TestRouteKeyedAllocatesNothing): the decision keeps what its reason is
// made of and Dest.Why builds the text only when read (the route log's
// sample, an error, Explain); a text key aliases the Bind parameter's
// bytes, an integer key is carried as the number (Dest.KeyInt). Statements
// whose decision depends on no parameter are decided at analysis and cost
// a copy. A text with inlined constants never
// seen before costs a lexer pass, two cache lookups, building its
// Statement and deciding it (a few microseconds and four allocations
// instead of a full parse); seen before, it costs one lookup.
package route
