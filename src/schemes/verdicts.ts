// The verifier's refusals as verdicts: a chain that cannot be reached is a 503 (retry the same payment),
// every other reason a 402 with that reason on the wire; and the settlement throttle's refusal.
import type { SchemeDeps, Verdict } from './scheme.ts'
import type { VerifyResult } from './verifier.ts'

export function refusal(result: Extract<VerifyResult, { ok: false }>): Verdict {
  if (result.reason === 'rpc_unavailable') {
    return {
      ok: 'unavailable',
      message: 'the chain could not be reached to verify the payment; retry shortly',
      reason: 'rpc_unavailable',
    }
  }
  // One client's chain look-ups in flight are bounded: the operator's RPC quota is not an attacker's to spend.
  if (result.reason === 'too_many_lookups') {
    return {
      ok: 'error',
      code: 'rate_limited',
      message: 'too many payments from this address are being verified at once; retry after one ends',
      retryAfterS: 1,
    }
  }
  const refused: Verdict = { ok: false, reason: result.reason, retryAfterMs: result.retryAfterMs }
  if (result.spent !== undefined) refused.spent = result.spent
  return refused
}

/**
 * While the settlement backlog would outrun new payments' validity windows, a scheme the leader settles after
 * the call refuses them before any work (503 settlement_backlog with its Retry-After), and while the token
 * cannot pay the treasury at all (503 settlement_halted); null: go on.
 */
export function backlogRefusal(throttle: SchemeDeps['settlementThrottle']): Verdict | null {
  if (!throttle?.engaged) return null
  return { ok: 'error', code: throttle.code, retryAfterS: throttle.retryAfterS }
}

/**
 * Only the token's halt (not the backlog, which counts authorizations and permits): for a scheme whose money
 * reaches the treasury by another road (batch-settlement's channel claims), still by the token.
 */
export function haltRefusal(throttle: SchemeDeps['settlementThrottle']): Verdict | null {
  if (!throttle?.engaged || throttle.code !== 'settlement_halted') return null
  return { ok: 'error', code: 'settlement_halted', retryAfterS: throttle.retryAfterS }
}
