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
