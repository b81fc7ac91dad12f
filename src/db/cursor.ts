// Cursor pagination in SQL: lists are newest first by (created_at, id); `starting_after` names the last row
// the client has seen, looked up inside the caller's account so a foreign id pages nothing.
import type { Sql, Tx } from './sql.ts'

type Paginated = 'calls' | 'endpoints' | 'payments' | 'webhooks' | 'events' | 'payouts'

/** `AND (created_at, id) < (that row)`, or nothing when there is no cursor. */
export function afterCursor(db: Sql | Tx, table: Paginated, startingAfter: string | null, accountId: string) {
  if (!startingAfter) return db``
  return db`AND (created_at, id) < (SELECT created_at, id FROM ${db(table)} WHERE id = ${startingAfter} AND account_id = ${accountId})`
}
