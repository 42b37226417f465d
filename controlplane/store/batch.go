package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/reconciler"
)

// A tick may write ten thousand hosts and as many events. These are the
// only writes with a backend-specific form: PostgreSQL takes new rows by
// COPY and updates by one UPDATE … FROM unnest(arrays) statement (one
// round trip each); SQLite takes multi-row INSERT statements, upserting
// for updates, inside the tick's transaction. Rows keep their order, so
// event ids follow the order of the events.

// maxParams bounds the parameters of one multi-row statement, well below
// both backends' limits (PostgreSQL 65535, SQLite 32766).
const maxParams = 8000

// insertRows runs "head VALUES (…), (…) tail" over rows of cols values
// (args flattened, row after row), in as few statements as maxParams
// allows. SQLite compiles the statement of a full chunk once and runs it
// for every chunk (compiling a long VALUES list costs as much as running
// it); its chunks are smaller, as its statements run in-process.
func (tx *txn) insertRows(ctx context.Context, head, tail string, cols int, args []any) error {
	per := maxParams / cols
	if tx.dialect == dialectSQLite {
		per = max(1, sqliteChunkParams/cols)
	}
	n := len(args) / cols
	var full *sql.Stmt
	defer func() {
		if full != nil {
			_ = full.Close()
		}
	}()
	for start := 0; start < n; start += per {
		end := min(start+per, n)
		q := head + " VALUES " + valuesRows(end-start, cols) + tail
		chunk := args[start*cols : end*cols]
		if tx.sq != nil && end-start == per && n >= 2*per {
			if full == nil {
				var err error
				if full, err = tx.sq.PrepareContext(ctx, q); err != nil {
					return err
				}
			}
			if _, err := full.ExecContext(ctx, chunk...); err != nil {
				return err
			}
			continue
		}
		if _, err := tx.exec(ctx, q, chunk...); err != nil {
			return err
		}
	}
	return nil
}

// sqliteChunkParams is the size of SQLite's multi-row statements.
const sqliteChunkParams = 1000

// hostRow is one rollout host to write.
type hostRow = kept.Row

// insertHosts writes the hosts of a new rollout.
func (tx *txn) insertHosts(ctx context.Context, enc *encoder, rows []hostRow) error {
	values, err := hostTable(enc, rows)
	if err != nil || len(values) == 0 {
		return err
	}
	if tx.dialect == dialectPostgres {
		_, err := tx.pg.CopyFrom(ctx, pgx.Identifier{"rollout_hosts"}, hostColumns, pgx.CopyFromRows(values))
		return err
	}
	return tx.insertRows(ctx, "INSERT INTO rollout_hosts ("+hostCols+")", "", hostColCount, flatten(values, hostColCount))
}

// updateHosts writes changed hosts; every one exists (apply checked).
func (tx *txn) updateHosts(ctx context.Context, enc *encoder, rows []hostRow) error {
	values, err := hostTable(enc, rows)
	if err != nil || len(values) == 0 {
		return err
	}
	if tx.dialect == dialectPostgres {
		cols := make([]any, hostColCount)
		for c := range cols {
			switch c {
			case 2:
				col := make([]int32, len(values))
				for i, v := range values {
					col[i] = int32(v[c].(int))
				}
				cols[c] = col
			case 5:
				col := make([]int64, len(values))
				for i, v := range values {
					col[i] = v[c].(int64)
				}
				cols[c] = col
			default:
				col := make([]string, len(values))
				for i, v := range values {
					col[i] = v[c].(string)
				}
				cols[c] = col
			}
		}
		_, err := tx.exec(ctx, `UPDATE rollout_hosts AS h SET wave = v.wave, target = v.target, state = v.state,
				since = v.since, previous = v.previous, reason = v.reason, blocked = v.blocked, budgets = v.budgets
			FROM unnest(?::text[], ?::text[], ?::integer[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[])
				AS v(`+hostCols+`)
			WHERE h.rollout_id = v.rollout_id AND h.hostname = v.hostname`, cols...)
		return err
	}
	return tx.insertRows(ctx, "INSERT INTO rollout_hosts ("+hostCols+")",
		` ON CONFLICT (rollout_id, hostname) DO UPDATE SET wave = excluded.wave, target = excluded.target,
			state = excluded.state, since = excluded.since, previous = excluded.previous, reason = excluded.reason,
			blocked = excluded.blocked, budgets = excluded.budgets`,
		hostColCount, flatten(values, hostColCount))
}

func hostTable(enc *encoder, rows []hostRow) ([][]any, error) {
	values := make([][]any, len(rows))
	for i, r := range rows {
		v, err := enc.hostValues(r.RolloutID, r.Host)
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	return values, nil
}

func flatten(rows [][]any, cols int) []any {
	out := make([]any, 0, len(rows)*cols)
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

const eventCols = "at, kind, rollout_id, channel, wave, host, from_state, to_state, reason, budgets"

var eventColumns = []string{"at", "kind", "rollout_id", "channel", "wave", "host", "from_state", "to_state", "reason", "budgets"}

// insertEvents writes events stamped at, in order (ids follow it).
func (tx *txn) insertEvents(ctx context.Context, enc *encoder, at time.Time, events []reconciler.Event) error {
	if len(events) == 0 {
		return nil
	}
	us := micros(at)
	values := make([][]any, len(events))
	for i, e := range events {
		reason, err := enc.reason(e.Reason)
		if err != nil {
			return err
		}
		budgets, err := eventBudgetsJSON(e.Budgets)
		if err != nil {
			return err
		}
		values[i] = []any{us, e.Kind, e.RolloutID, e.Channel, e.Wave, e.Host, e.From, e.To, reason, budgets}
	}
	if tx.dialect == dialectPostgres {
		n, err := tx.pg.CopyFrom(ctx, pgx.Identifier{"events"}, eventColumns, pgx.CopyFromRows(values))
		if err == nil && n != int64(len(values)) {
			err = fmt.Errorf("copied %d of %d events", n, len(values))
		}
		return err
	}
	return tx.insertRows(ctx, "INSERT INTO events ("+eventCols+")", "", len(eventColumns), flatten(values, len(eventColumns)))
}
