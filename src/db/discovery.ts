// Queries of the public discovery listing: listed endpoints, and the hourly figures paid traffic left.
import type { StoredDiscovery } from '../discovery/listing.ts'
import type { ObservedRow } from '../discovery/observed.ts'
import type { Sql } from './sql.ts'

export interface ListedEndpointRow {
  id: string
  name: string | null
  description: string | null
  price_atomic: bigint
  pricing: unknown
  batch_settlement: boolean
  discovery: StoredDiscovery | null
  updated_at: Date
}

export interface ListedFilter {
  tag: string | null
  minPriceAtomic: bigint | null
  maxPriceAtomic: bigint | null
  limit: number
  offset: number
}

// The headline price (fixed price, rules' default, usage ceiling) is what the price range filters on.
const LISTED_WHERE = (sql: Sql, f: ListedFilter) => sql`
  WHERE listed AND deleted_at IS NULL AND status = 'active'
  ${f.tag === null ? sql`` : sql`AND discovery->'tags' @> ${sql.json([f.tag])}`}
  ${f.minPriceAtomic === null ? sql`` : sql`AND price_atomic >= ${f.minPriceAtomic}`}
  ${f.maxPriceAtomic === null ? sql`` : sql`AND price_atomic <= ${f.maxPriceAtomic}`}`

export async function listListedEndpoints(
  sql: Sql,
  f: ListedFilter,
): Promise<{ rows: ListedEndpointRow[]; total: number }> {
  const [rows, [count]] = await Promise.all([
    sql<ListedEndpointRow[]>`
      SELECT id, name, description, price_atomic, pricing, batch_settlement, discovery, updated_at
      FROM endpoints ${LISTED_WHERE(sql, f)}
      ORDER BY created_at, id
      LIMIT ${f.limit} OFFSET ${f.offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n FROM endpoints ${LISTED_WHERE(sql, f)}`,
  ])
  return { rows, total: count!.n }
}

/** One instance's counts since its last flush, added to the hour they fell in. */
export interface HourlyDelta {
  endpointId: string
  hour: Date
  paidCalls: number
  succeeded: number
  unserved: number
  latencyBuckets: number[]
}

export interface PayerDelta {
  endpointId: string
  day: string
  payer: string
  calls: number
}

export interface Delivered {
  receiptId: string
  bodySha256: string
  bodyBytes: number
}

/** Adds the deltas (every instance adds its own; nothing is read back). */
export async function addObserved(
  sql: Sql,
  hours: HourlyDelta[],
  payers: PayerDelta[],
  delivered: Delivered[] = [],
): Promise<void> {
  await sql.begin(async (tx) => {
    for (const d of delivered) {
      await tx`
        INSERT INTO call_deliveries (receipt_id, body_sha256, body_bytes)
        VALUES (${d.receiptId}, ${d.bodySha256}, ${d.bodyBytes})
        ON CONFLICT (receipt_id) DO NOTHING`
    }
    for (const h of hours) {
      await tx`
        INSERT INTO endpoint_hourly (endpoint_id, hour, paid_calls, succeeded, unserved, latency_buckets)
        VALUES (${h.endpointId}, ${h.hour}, ${h.paidCalls}, ${h.succeeded}, ${h.unserved},
                ${h.latencyBuckets}::bigint[])
        ON CONFLICT (endpoint_id, hour) DO UPDATE SET
          paid_calls = endpoint_hourly.paid_calls + excluded.paid_calls,
          succeeded = endpoint_hourly.succeeded + excluded.succeeded,
          unserved = endpoint_hourly.unserved + excluded.unserved,
          latency_buckets = ARRAY(
            SELECT coalesce(a, 0) + coalesce(b, 0)
            FROM unnest(endpoint_hourly.latency_buckets, excluded.latency_buckets) WITH ORDINALITY AS t(a, b, i)
            ORDER BY i)`
    }
    for (const p of payers) {
      await tx`
        INSERT INTO endpoint_payer_days (endpoint_id, day, payer, calls)
        VALUES (${p.endpointId}, ${p.day}, ${p.payer}, ${p.calls})
        ON CONFLICT (endpoint_id, day, payer) DO UPDATE SET calls = endpoint_payer_days.calls + excluded.calls`
    }
  })
}

/**
 * The window's figures of the given endpoints: at most 24 × days hourly rows each, and their payers of the
 * window, never the call history.
 */
export async function readObserved(
  sql: Sql,
  endpointIds: string[],
  since: Date,
): Promise<Map<string, ObservedRow>> {
  const out = new Map<string, ObservedRow>()
  if (endpointIds.length === 0) return out
  const hours = await sql<
    { endpoint_id: string; paid: string; ok: string; unserved: string; buckets: string[] }[]
  >`
    SELECT h.endpoint_id, sum(h.paid_calls)::text AS paid, sum(h.succeeded)::text AS ok,
           sum(h.unserved)::text AS unserved,
           ARRAY(SELECT sum(x)::text FROM endpoint_hourly h2, unnest(h2.latency_buckets) WITH ORDINALITY AS u(x, i)
                 WHERE h2.endpoint_id = h.endpoint_id AND h2.hour >= ${since}
                 GROUP BY i ORDER BY i) AS buckets
    FROM endpoint_hourly h
    WHERE h.endpoint_id = ANY(${endpointIds}) AND h.hour >= ${since}
    GROUP BY h.endpoint_id`
  const repeat = await sql<{ endpoint_id: string; n: number }[]>`
    SELECT endpoint_id, count(*)::int AS n FROM (
      SELECT endpoint_id, payer FROM endpoint_payer_days
      WHERE endpoint_id = ANY(${endpointIds}) AND day >= ${since.toISOString().slice(0, 10)}::date
      GROUP BY endpoint_id, payer HAVING sum(calls) >= 2) r
    GROUP BY endpoint_id`
  const repeatBy = new Map(repeat.map((r) => [r.endpoint_id, r.n]))
  for (const h of hours) {
    out.set(h.endpoint_id, {
      paid_calls: Number(h.paid),
      succeeded: Number(h.ok),
      unserved: Number(h.unserved),
      latency_buckets: h.buckets.map(Number),
      repeat_payers: repeatBy.get(h.endpoint_id) ?? 0,
    })
  }
  return out
}

/** Hourly and daily rows older than the window serve no listing; retention drops them. */
export async function pruneObserved(sql: Sql, before: Date): Promise<void> {
  await sql`DELETE FROM endpoint_hourly WHERE hour < ${before}`
  await sql`DELETE FROM endpoint_payer_days WHERE day < ${before.toISOString().slice(0, 10)}::date`
}

/** What a paid answer delivered, when it was delivered whole. */
export async function findDelivery(
  sql: Sql,
  receiptId: string,
): Promise<{ body_sha256: string; body_bytes: number } | null> {
  const [row] = await sql<{ body_sha256: string; body_bytes: number }[]>`
    SELECT body_sha256, body_bytes::int AS body_bytes FROM call_deliveries WHERE receipt_id = ${receiptId}`
  return row ?? null
}
