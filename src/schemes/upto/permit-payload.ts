// The x402 upto payload as the published client sends it ({signature, permit2Authorization}, and in the
// payment payload's extensions the `eip2612GasSponsoring` approval of a payer that never approved Permit2),
// validated once at the boundary into the chain room's UptoPermit and SponsoredApproval; a malformed one is
// a reason, never a throw.
import * as v from 'valibot'
import type { Address, Hex } from 'viem'
import type { SponsoredApproval, UptoPermit } from '../../chain/upto-permit.ts'

/** The extension's key, as @x402/extensions and the published upto client name it. */
export const EIP2612_GAS_SPONSORING = 'eip2612GasSponsoring'

const AddressField = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
const Uint = v.pipe(v.string(), v.regex(/^\d{1,78}$/))

const UptoPayload = v.object({
  // 65 bytes for a key; a contract wallet's (ERC-1271, an ERC-6492 wrapper) is its own, up to 4 KiB.
  signature: v.pipe(v.string(), v.maxLength(2 + 8192), v.regex(/^0x(?:[0-9a-fA-F]{2}){65,}$/)),
  permit2Authorization: v.object({
    from: AddressField,
    permitted: v.object({ token: AddressField, amount: Uint }),
    spender: AddressField,
    nonce: Uint,
    deadline: Uint,
    witness: v.object({ to: AddressField, facilitator: AddressField, validAfter: Uint }),
  }),
})

const SponsoredApprovalInfo = v.object({
  from: AddressField,
  asset: AddressField,
  spender: AddressField,
  amount: Uint,
  nonce: Uint,
  deadline: Uint,
  signature: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{130}$/)),
  version: v.pipe(v.string(), v.regex(/^\d+(\.\d+)*$/)),
})

/**
 * The extension as a 402 declares it: @x402/extensions' declareEip2612GasSponsoringExtension, its schema cut
 * to the fields the approval must have. The published upto client signs an approval only where the key is
 * declared, and echoes the declaration in every payment payload: the published schema (~900 bytes of
 * patterns and descriptions) made each upto payment header ~1.2 kB longer to decode, about 50 µs of the
 * proxy's CPU a call in the upto bench's profile (parseProof 70 → 141 ms a 4 s run).
 */
export const EIP2612_GAS_SPONSORING_DECLARATION = {
  info: { description: 'EIP-2612 approval of Permit2, submitted by the facilitator', version: '1' },
  schema: {
    type: 'object',
    required: ['from', 'asset', 'spender', 'amount', 'nonce', 'deadline', 'signature', 'version'],
  },
} as const

const APPROVAL_FIELDS = ['from', 'asset', 'spender', 'amount', 'nonce', 'deadline', 'signature']

export type ParsedUpto =
  | { ok: true; permit: UptoPermit; signature: Hex; approval: SponsoredApproval | null }
  | { ok: false; detail: string }

/** `payload`: the payment payload ({payload, extensions?}). */
export function parseUptoPayload(payload: unknown): ParsedUpto {
  const outer = payload as { payload?: unknown; extensions?: Record<string, unknown> | null } | null
  const r = v.safeParse(UptoPayload, outer?.payload)
  if (!r.success)
    return { ok: false, detail: `not an x402 upto permit: ${v.summarize(r.issues).split('\n')[0]}` }
  const a = r.output.permit2Authorization
  let approval: SponsoredApproval | null = null
  // The client echoes the 402's declaration ({description, version}) whether or not it signed: an info
  // without the approval's fields is no approval, as the published facilitator reads it.
  const info0 = (outer?.extensions?.[EIP2612_GAS_SPONSORING] as { info?: unknown } | undefined)?.info
  if (typeof info0 === 'object' && info0 !== null && APPROVAL_FIELDS.every((f) => f in info0)) {
    const info = v.safeParse(SponsoredApprovalInfo, info0)
    if (!info.success)
      return {
        ok: false,
        detail: `not an ${EIP2612_GAS_SPONSORING} approval: ${v.summarize(info.issues).split('\n')[0]}`,
      }
    const i = info.output
    approval = {
      from: i.from as Address,
      asset: i.asset as Address,
      spender: i.spender as Address,
      value: BigInt(i.amount),
      nonce: BigInt(i.nonce),
      deadline: BigInt(i.deadline),
      signature: i.signature as Hex,
    }
  }
  return {
    ok: true,
    approval,
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
