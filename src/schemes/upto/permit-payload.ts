// The x402 upto payload as the published client sends it ({signature, permit2Authorization}), validated
// once at the boundary into the chain room's UptoPermit; a malformed one is a reason, never a throw.
import * as v from 'valibot'
import type { Address, Hex } from 'viem'
import type { UptoPermit } from '../../chain/upto-permit.ts'

const AddressField = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
const Uint = v.pipe(v.string(), v.regex(/^\d{1,78}$/))

const UptoPayload = v.object({
  signature: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{130}$/)),
  permit2Authorization: v.object({
    from: AddressField,
    permitted: v.object({ token: AddressField, amount: Uint }),
    spender: AddressField,
    nonce: Uint,
    deadline: Uint,
    witness: v.object({ to: AddressField, facilitator: AddressField, validAfter: Uint }),
  }),
})

export type ParsedUpto = { ok: true; permit: UptoPermit; signature: Hex } | { ok: false; detail: string }

export function parseUptoPayload(payload: unknown): ParsedUpto {
  const inner = (payload as { payload?: unknown } | null)?.payload
  const r = v.safeParse(UptoPayload, inner)
  if (!r.success)
    return { ok: false, detail: `not an x402 upto permit: ${v.summarize(r.issues).split('\n')[0]}` }
  const a = r.output.permit2Authorization
  return {
    ok: true,
    signature: r.output.signature as Hex,
    permit: {
      from: a.from as Address,
      token: a.permitted.token as Address,
      amount: BigInt(a.permitted.amount),
      spender: a.spender as Address,
      nonce: BigInt(a.nonce),
      deadline: BigInt(a.deadline),
      to: a.witness.to as Address,
      facilitator: a.witness.facilitator as Address,
      validAfter: BigInt(a.witness.validAfter),
    },
  }
}
