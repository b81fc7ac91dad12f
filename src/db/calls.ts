// Queries on metered calls (the captured ones).
import { afterCursor } from './cursor.ts'
import type { Sql, Tx } from './sql.ts'

export interface CallRow {
  id: string
  proof_key: string
  endpoint_id: string
  account_id: string
  payer: string
  amount_atomic: bigint
  owner_share_atomic: bigint
  fee_atomic: bigint
  upstream_status: number
  method: string
  created_at: Date
}

export async function listCalls(
  db: Sql | Tx,
  q: {
    accountId: string
    endpointId: string | null
    limit: number
    startingAfter: string | null
    /** Upstream status range [from, to), e.g. 200..300 for 2xx. */
    status?: { from: number; to: number } | null
    createdGte?: Date | null
    createdLt?: Date | null
  },
): Promise<CallRow[]> {
  return db<CallRow[]>`
    SELECT id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic, fee_atomic,
           upstream_status, method, created_at
    FROM calls
    WHERE account_id = ${q.accountId}
    ${q.endpointId ? db`AND endpoint_id = ${q.endpointId}` : db``}
    ${q.status ? db`AND upstream_status >= ${q.status.from} AND upstream_status < ${q.status.to}` : db``}
    ${q.createdGte ? db`AND created_at >= ${q.createdGte}` : db``}
    ${q.createdLt ? db`AND created_at < ${q.createdLt}` : db``}
    ${afterCursor(db, 'calls', q.startingAfter, q.accountId)}
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
}
