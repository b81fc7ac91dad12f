// The verifier's refusals as verdicts: a chain that cannot be reached is a 503 (retry the same payment),
// every other reason a 402 with that reason on the wire.
import type { VerifyResult } from '../data-plane/verifier.ts'
import type { Verdict } from './scheme.ts'

export function refusal(result: Extract<VerifyResult, { ok: false }>): Verdict {
  if (result.reason === 'rpc_unavailable') {
    return {
      ok: 'unavailable',
      message: 'the chain could not be reached to verify the payment; retry shortly',
      reason: 'rpc_unavailable',
    }
  }
  return { ok: false, reason: result.reason, retryAfterMs: result.retryAfterMs }
}
