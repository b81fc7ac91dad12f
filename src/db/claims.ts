// Claim reads. Every change of a claim lives in src/books/claims.ts.
import type { Sql } from './sql.ts'

/** What is known about a proof that lost its claim (for the error message and the replay cache). */
export async function findClaim(
  sql: Sql,
  proofKey: string,
): Promise<{ status: string; target_id: string; retry_until: Date | null } | null> {
  const [row] = await sql<{ status: string; target_id: string; retry_until: Date | null }[]>`
    SELECT status, target_id, retry_until FROM claims WHERE proof_key = ${proofKey}`
  return row ?? null
}

/** Where a checkout's x402 authorization stands (POST /pay/:id waits on it while it settles). */
export async function findSettlement(
  sql: Sql,
  proofKey: string,
): Promise<{
  status: string
  target_id: string
  settlement_tx: string | null
  settlement_error: string | null
} | null> {
  const [row] = await sql<
    { status: string; target_id: string; settlement_tx: string | null; settlement_error: string | null }[]
  >`SELECT status, target_id, settlement_tx, settlement_error FROM claims WHERE proof_key = ${proofKey}`
  return row ?? null
}
