// Proofs claimed for a call but never captured by the end of their window (the upstream failed every time,
// or the call is in doubt because its process died mid-call) are owed back: a transaction proof becomes
// refund_due with a refund entry; an x402 authorization is void (never settled, no money moved).
import { markRefundDue, voidClaim } from '../../books/claims.ts'
import type { Sql } from '../../db/sql.ts'

export async function expireUncapturedClaims(sql: Sql): Promise<number> {
  await voidClaim(sql)
  const refunded = await markRefundDue(sql)
  return refunded.ok ? refunded.n : 0
}
