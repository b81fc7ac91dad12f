// Who called, as the books keep it: on a paid call to an endpoint with identity rules, the signer tollgate
// verified (or "unsigned") and the rule that priced the call. Stored on the call row (JSON), shown by
// GET /calls and the receipt, and signed into the final receipt. Null on every other call: an endpoint
// without rules reads no signature and writes nothing here.
import type { Decision } from './rules.ts'
import type { Identity, IdentityFailure } from './verify-request.ts'

export interface CallAgent {
  /** The operator's name for the directory or key that verified; "unsigned" for no valid signature. */
  signer: string
  /** The key id of a verified signature; null when unsigned. */
  keyid: string | null
  /** Why a signature that was sent did not verify (the call was then priced as unsigned); else null. */
  failure: IdentityFailure | null
  /** The index of the rule that priced the call; null when none matched (the endpoint's price). */
  rule: number | null
  /** What that rule did: free, price, multiplier, endpoint_price. */
  action: string
}

export const UNSIGNED = 'unsigned'

export function callAgent(identity: Identity, decision: Exclude<Decision, { kind: 'block' }>): CallAgent {
  const verified = identity.status === 'verified'
  return {
    signer: verified ? identity.signer : UNSIGNED,
    keyid: verified ? identity.keyid : null,
    failure: identity.status === 'failed' ? identity.reason : null,
    rule: decision.rule < 0 ? null : decision.rule,
    action: decision.action,
  }
}
