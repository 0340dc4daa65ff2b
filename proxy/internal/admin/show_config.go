package admin

// SHOW CONFIG and SHOW USERS: the running settings and who may log in.
// Secrets never appear: the Host redacts the values, and a user's
// password is never part of its snapshot.

func showConfig(h Host) *result {
	r := &result{cols: textCols("key", "value", "default", "changeable")}
	for _, row := range h.Config() {
		ch := "no"
		if row.Changeable {
			ch = "yes"
		}
		r.rows = append(r.rows, []any{row.Key, row.Value, row.Default, ch})
	}
	return r
}

func showUsers(h Host) *result {
	r := &result{cols: textCols("name", "auth", "admin")}
	for _, u := range h.Users() {
		method := "scram-sha-256"
		switch {
		case u.Trust:
			method = "trust"
		case !u.Verifier:
			method = "scram-sha-256 (plain-text password in the config)"
		}
		admin := "no"
		if u.Admin {
			admin = "yes"
		}
		r.rows = append(r.rows, []any{u.Name, method, admin})
	}
	return r
}
