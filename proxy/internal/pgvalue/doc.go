// Package pgvalue is the proxy's knowledge of Postgres values: the columns
// of a RowDescription, and the order and exact output of the values a
// merge of every shard's answer compares and computes. It builds on
// pgwire; type OIDs are pgx's (pgtype.Int8OID, ...), the one table of
// them the proxy and its analyzer use.
//
//	RowDescription ──ParseRowDesc──▶ []Field ──AppendRowDesc──▶ RowDescription
//	shard values ──CompareValues──▶ Postgres's order (ints, floats, numeric,
//	                                text by bytes, bool, uuid, dates and
//	                                times in any DateStyle: TimeStyle;
//	                                intervals in any IntervalStyle; time,
//	                                timetz)
//	             ──DecodeNum──▶ Num ──NumAdd / NumAvg / NumCast──▶ Num
//	                                ──AppendNum──▶ text or binary, as
//	                                  int2/4/8out, numeric_out/send,
//	                                  float4out/float8out write it
//	             ──DecodeArray──▶ a binary array's elements (the merge's
//	                              array_agg partials, pg_terminate_backend's
//	                              argument)
//
//	type OID + modifier ──TypeName──▶ varchar(7), numeric(10,2), ... (a
//	                                  read in two stages casts its rows
//	                                  back to their column's modifier)
//
//	RowDescription, ParameterDescription ──EditRowDesc, EditParamDesc──▶
//	                                  the same, their table OIDs, attnums
//	                                  and type OIDs rewritten in place
//	binary array or record value ──ValueOIDs──▶ where the type OIDs
//	                                  inside it are
//
//	values.go  all of the above but TypeName, the edits and ValueOIDs (Dec: exact decimals with
//	           numeric's display scale; floats formatted per
//	           extra_float_digits)
//	times.go   dates and times written in any DateStyle read as the
//	           instants they name (TimeStyle: DateStyle's day/month
//	           order, the TimeZone an abbreviation belongs to)
//	intervals.go intervals (by their span), times and times with time
//	           zone (by UTC, then zone) ordered as Postgres orders them
//	intervalsum.go Interval: merged sums (interval_pl) and averages
//	           (interval_div) of intervals, written as interval_out writes
//	           them in each IntervalStyle
//	shortest.go the shortest digits of a float as Postgres's Ryu picks
//	           them (never a decimal halfway to a neighbour, which Go's
//	           strconv takes when the mantissa is even)
//	typmod.go  TypeName: the SQL name of a type with its modifier
//	valueoids.go ValueOIDs, RecordOID, RecordArrayOID
//	relabel.go RowDescColumns, EditRowDesc, EditParamDesc, RowDescUserOIDs,
//	           ParamDescUserOIDs, FirstUserOID
//
// Errors are *pgwire.Error with Postgres's SQLSTATE (22003 out of range,
// 0A000 for what a merge cannot compute).
package pgvalue
