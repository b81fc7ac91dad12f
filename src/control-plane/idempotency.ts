// Idempotency-Key on creating POSTs: the key row is inserted in the same transaction as the object it
// creates, so a concurrent duplicate waits on the unique key and then replays the stored answer; a failed
// request rolls back and frees the key. Keys are kept 24 h (then pruned by the retention job).
import { createHash } from 'node:crypto'
import { IDEMPOTENCY_TTL_MS } from '../db/retention.ts'
import type { Sql, Tx } from '../db/sql.ts'
import { ApiError } from '../errors.ts'
import type { RouteResult } from './route.ts'

const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/

export function requestFingerprint(method: string, path: string, body: Buffer): string {
  return createHash('sha256').update(method).update('\0').update(path).update('\0').update(body).digest('hex')
}

export async function withIdempotency(
  sql: Sql,
  q: { accountId: string; key: string; fingerprint: string },
  run: (tx: Tx) => Promise<RouteResult>,
): Promise<RouteResult> {
  if (!KEY_FORMAT.test(q.key)) {
    throw new ApiError('invalid_idempotency_key', 'Idempotency-Key must be 1–255 visible ASCII characters')
  }
  return (await sql.begin(async (tx) => {
    // Expired keys are free again.
    await tx`DELETE FROM idempotency_keys WHERE account_id = ${q.accountId} AND key = ${q.key}
             AND created_at < now() - ${IDEMPOTENCY_TTL_MS} * interval '1 millisecond'`
    const inserted = await tx`
      INSERT INTO idempotency_keys (account_id, key, request_hash) VALUES (${q.accountId}, ${q.key}, ${q.fingerprint})
      ON CONFLICT DO NOTHING RETURNING key`
    if (inserted.length === 0) {
      const [prior] = await tx<
        { request_hash: string; status_code: number | null; response_body: string | null }[]
      >`
        SELECT request_hash, status_code, response_body FROM idempotency_keys
        WHERE account_id = ${q.accountId} AND key = ${q.key}`
      if (!prior || prior.request_hash !== q.fingerprint) {
        throw new ApiError(
          'idempotency_key_reused',
          'this Idempotency-Key was used with a different request; use a new key for a new request',
        )
      }
      if (prior.status_code === null)
        throw new ApiError('idempotency_key_in_use', 'a request with this key is in progress')
      return {
        status: prior.status_code,
        body: JSON.parse(prior.response_body!),
        headers: { 'idempotent-replayed': 'true' },
      }
    }
    const result = await run(tx)
    await tx`UPDATE idempotency_keys SET status_code = ${result.status}, response_body = ${JSON.stringify(result.body)}
             WHERE account_id = ${q.accountId} AND key = ${q.key}`
    return result
  })) as RouteResult
}
