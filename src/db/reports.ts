// The dashboard's overview figures: revenue per UTC day and the top endpoints over a recent window. Both
// read only the window's rows through the (account_id, created_at) indexes, never the whole history.
import type { Sql, Tx } from './sql.ts'

export interface RevenueDayRow {
  day: string
  calls: number
  calls_atomic: bigint
  payments: number
  payments_atomic: bigint
}

export interface TopEndpointRow {
  endpoint_id: string
  name: string | null
  calls: number
  amount_atomic: bigint
}

/** Per UTC day since `from`: captured calls and paid payments (a payment on the day it was created). */
export async function revenueByDay(
  db: Sql | Tx,
  q: { accountId: string; from: Date },
): Promise<RevenueDayRow[]> {
  return db<RevenueDayRow[]>`
    WITH c AS (
      SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*)::int AS n,
             sum(amount_atomic)::bigint AS atomic
      FROM calls WHERE account_id = ${q.accountId} AND created_at >= ${q.from}
      GROUP BY 1
    ), p AS (
      SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*)::int AS n,
             sum(amount_received_atomic)::bigint AS atomic
      FROM payments WHERE account_id = ${q.accountId} AND created_at >= ${q.from} AND status = 'paid'
      GROUP BY 1
    )
    SELECT coalesce(c.day, p.day) AS day,
           coalesce(c.n, 0) AS calls, coalesce(c.atomic, 0)::bigint AS calls_atomic,
           coalesce(p.n, 0) AS payments, coalesce(p.atomic, 0)::bigint AS payments_atomic
    FROM c FULL JOIN p ON p.day = c.day
    ORDER BY 1`
}

export async function topEndpoints(
  db: Sql | Tx,
  q: { accountId: string; from: Date; limit: number },
): Promise<TopEndpointRow[]> {
  return db<TopEndpointRow[]>`
    SELECT c.endpoint_id, e.name, c.calls, c.amount_atomic
    FROM (
      SELECT endpoint_id, count(*)::int AS calls, sum(amount_atomic)::bigint AS amount_atomic
      FROM calls WHERE account_id = ${q.accountId} AND created_at >= ${q.from}
      GROUP BY endpoint_id
    ) c LEFT JOIN endpoints e ON e.id = c.endpoint_id
    ORDER BY c.amount_atomic DESC, c.endpoint_id
    LIMIT ${q.limit}`
}
