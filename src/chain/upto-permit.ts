// x402 `upto` payments: a Permit2 witness transfer the payer signs for a maximum, naming the x402 upto proxy
// as spender and a witness {to, facilitator, validAfter}; the facilitator later settles any amount up to that
// maximum, to `to` only. Here: the canonical addresses, the EIP-712 digest, the local verification (no RPC
// but a contract wallet's own check) and the chain's half of it (nonce unused, balance, Permit2 allowance),
// read in one round of calls.
import {
  type Address,
  bytesToHex,
  type Client,
  getAddress,
  type Hex,
  hashTypedData,
  hexToBytes,
  parseAbi,
  type TypedDataDefinition,
} from 'viem'
import { getBlockNumber, readContract } from 'viem/actions'
import type { BalanceRead } from './check-authorization.ts'
import { keccakBytes as keccak } from './keccak.ts'
import { recoverSigner, writeHex, writeUint256 } from './recover-authorization.ts'
import type { TokenReads } from './token-reads.ts'
import { sameAddress } from './transfer.ts'
import type { WalletDigestVerifier } from './verify-smart-wallet.ts'

/** Uniswap's Permit2, at the same address on every chain (CREATE2). */
export const PERMIT2_ADDRESS: Address = '0x000000000022D473030F116dDEE9F6B43aC78BA3'
/** The x402 project's upto proxy (x402UptoPermit2Proxy), the spender every upto permit names. */
export const UPTO_PROXY_ADDRESS: Address = '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002'

/** The EIP-712 types the payer signs (Permit2's PermitWitnessTransferFrom with the upto proxy's witness). */
export const uptoPermitTypes = {
  PermitWitnessTransferFrom: [
    { name: 'permitted', type: 'TokenPermissions' },
    { name: 'spender', type: 'address' },
    { name: 'nonce', type: 'uint256' },
    { name: 'deadline', type: 'uint256' },
    { name: 'witness', type: 'Witness' },
  ],
  TokenPermissions: [
    { name: 'token', type: 'address' },
    { name: 'amount', type: 'uint256' },
  ],
  Witness: [
    { name: 'to', type: 'address' },
    { name: 'facilitator', type: 'address' },
    { name: 'validAfter', type: 'uint256' },
  ],
} as const

/** The permit as signed: `amount` is the maximum the payer allows, not what will be charged. */
export interface UptoPermit {
  from: Address
  token: Address
  amount: bigint
  spender: Address
  nonce: bigint
  /** Unix seconds; Permit2 refuses the transfer after it. */
  deadline: bigint
  to: Address
  facilitator: Address
  /** Unix seconds; the proxy refuses the transfer before it. */
  validAfter: bigint
}

/**
 * The x402 `eip2612GasSponsoring` extension's permit: a payer who never approved Permit2 signs the token's
 * EIP-2612 approval of Permit2 beside its upto permit, and the settlement submits it first (the proxy's
 * settleWithPermit), paying its gas. It *sets* the allowance to `value`, which the proxy requires to be the
 * upto permit's maximum: it funds that one permit only (src/books/claims.ts keeps such a payer to one).
 */
export interface SponsoredApproval {
  /** As the payload names them: the token owner, the token, and the spender (Permit2). */
  from: Address
  asset: Address
  spender: Address
  value: bigint
  /** The token's EIP-2612 nonce of `from` when signed: only the current one can be submitted. */
  nonce: bigint
  /** Unix seconds. */
  deadline: bigint
  signature: Hex
}

/** An upto permit and its signature in the form the claims table keeps (numbers as decimal strings). */
export interface StoredUptoPermit {
  signature: Hex
  from: Address
  token: Address
  amount: string
  spender: Address
  nonce: string
  deadline: string
  to: Address
  facilitator: Address
  validAfter: string
  /** The EIP-2612 approval of Permit2 the settlement submits first (eip2612GasSponsoring); absent: none. */
  permit2612?: { value: string; nonce: string; deadline: string; signature: Hex }
}

export function storedUptoPermit(
  p: UptoPermit,
  signature: Hex,
  sponsored: SponsoredApproval | null = null,
): StoredUptoPermit {
  return {
    ...(sponsored === null
      ? {}
      : {
          permit2612: {
            value: sponsored.value.toString(),
            nonce: sponsored.nonce.toString(),
            deadline: sponsored.deadline.toString(),
            signature: sponsored.signature,
          },
        }),
    signature,
    from: p.from,
    token: p.token,
    amount: p.amount.toString(),
    spender: p.spender,
    nonce: p.nonce.toString(),
    deadline: p.deadline.toString(),
    to: p.to,
    facilitator: p.facilitator,
    validAfter: p.validAfter.toString(),
  }
}

export function uptoPermitFromStored(s: StoredUptoPermit): UptoPermit {
  return {
    from: s.from,
    token: s.token,
    amount: BigInt(s.amount),
    spender: s.spender,
    nonce: BigInt(s.nonce),
    deadline: BigInt(s.deadline),
    to: s.to,
    facilitator: s.facilitator,
    validAfter: BigInt(s.validAfter),
  }
}

export function uptoPermitTypedData(
  chainId: number,
  p: UptoPermit,
): TypedDataDefinition<typeof uptoPermitTypes, 'PermitWitnessTransferFrom'> {
  return {
    // Permit2's domain has no version field: a domain with one would hash to another separator.
    domain: { name: 'Permit2', chainId, verifyingContract: PERMIT2_ADDRESS },
    types: uptoPermitTypes,
    primaryType: 'PermitWitnessTransferFrom',
    message: {
      permitted: { token: getAddress(p.token), amount: p.amount },
      spender: getAddress(p.spender),
      nonce: p.nonce,
      deadline: p.deadline,
      witness: { to: getAddress(p.to), facilitator: getAddress(p.facilitator), validAfter: p.validAfter },
    },
  }
}

const PERMIT2_DOMAIN_TYPEHASH = keccak('EIP712Domain(string name,uint256 chainId,address verifyingContract)')
const TOKEN_PERMISSIONS_TYPEHASH = keccak('TokenPermissions(address token,uint256 amount)')
const WITNESS_TYPEHASH = keccak('Witness(address to,address facilitator,uint256 validAfter)')
// EIP-712 appends the referenced types sorted by name: Permit2's stub followed by the proxy's witness type string.
const PERMIT_WITNESS_TYPEHASH = keccak(
  'PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)' +
    'TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)',
)

// Permit2's domain separator by chain: a service has one chain, so a plain map never grows.
const permit2Domains = new Map<number, Uint8Array>()

function permit2Domain(chainId: number): Uint8Array {
  let separator = permit2Domains.get(chainId)
  if (!separator) {
    const buf = new Uint8Array(4 * 32)
    buf.set(PERMIT2_DOMAIN_TYPEHASH, 0)
    buf.set(keccak('Permit2'), 32)
    writeUint256(buf, 64, BigInt(chainId))
    writeHex(buf, 96 + 12, PERMIT2_ADDRESS, 20)
    separator = keccak(buf)
    permit2Domains.set(chainId, separator)
  }
  return separator
}

/**
 * The digest Permit2 checks the signature against: keccak256(0x1901 ‖ domain ‖ hashStruct(permit)), built by
 * hand from fixed-size fields (viem's generic hashTypedData cost ~0.75 ms of CPU per permit; this is four
 * keccaks). test/chain/upto-permit.unit.test.ts holds it equal to hashTypedData. Throws on malformed fields.
 */
export function uptoPermitDigestBytes(chainId: number, p: UptoPermit): Uint8Array {
  const permitted = new Uint8Array(3 * 32)
  permitted.set(TOKEN_PERMISSIONS_TYPEHASH, 0)
  writeHex(permitted, 32 + 12, p.token, 20)
  writeUint256(permitted, 64, p.amount)
  const witness = new Uint8Array(4 * 32)
  witness.set(WITNESS_TYPEHASH, 0)
  writeHex(witness, 32 + 12, p.to, 20)
  writeHex(witness, 64 + 12, p.facilitator, 20)
  writeUint256(witness, 96, p.validAfter)
  const struct = new Uint8Array(6 * 32)
  struct.set(PERMIT_WITNESS_TYPEHASH, 0)
  struct.set(keccak(permitted), 32)
  writeHex(struct, 64 + 12, p.spender, 20)
  writeUint256(struct, 96, p.nonce)
  writeUint256(struct, 128, p.deadline)
  struct.set(keccak(witness), 160)
  const message = new Uint8Array(66)
  message[0] = 0x19
  message[1] = 0x01
  message.set(permit2Domain(chainId), 2)
  message.set(keccak(struct), 34)
  return keccak(message)
}

/** The same digest through viem's generic EIP-712 code, as 0x-hex (tests, tools). */
export function uptoPermitDigest(chainId: number, p: UptoPermit): Hex {
  return hashTypedData(uptoPermitTypedData(chainId, p))
}

/** Replay key of a permit: Permit2 spends each (owner, nonce) once, whatever signature bytes carry it. */
export function uptoProofKey(p: Pick<UptoPermit, 'from' | 'nonce'>): string {
  return `upto:${p.from.toLowerCase()}:${p.nonce.toString()}`
}

export type UptoFailure =
  | 'invalid_signature'
  | 'wrong_recipient'
  | 'wrong_asset'
  | 'wrong_spender'
  | 'wrong_facilitator'
  | 'max_amount_mismatch'
  | 'authorization_not_yet_valid'
  | 'authorization_expired'
  | 'smart_wallet_not_deployed'
  | 'rpc_unavailable'

/** `signature`: what settlement submits (a deployed wallet's ERC-6492 wrapper taken off). */
export type UptoCheck = { ok: true; payer: Address; signature: Hex } | { ok: false; reason: UptoFailure }

/**
 * Crypto and arithmetic: the permit names the upto proxy, pays the treasury, is settleable by one of our
 * facilitators, signs exactly the maximum offered for the asset offered, is inside its window with time to
 * settle, and is signed by `from`: its key's signature recovered (no RPC), or, when that is not `from`,
 * the wallet at `from` asked (`wallet`: an eth_call, so EOA payers never pay for it). Permit2 asks a contract
 * owner the same (EIP-1271) when the permit is settled. Without `wallet`, EOA payers only.
 */
export async function verifyUptoPermit(q: {
  chainId: number
  permit: UptoPermit
  signature: Hex
  usdc: Address
  treasury: Address
  facilitators: readonly Address[]
  /** The ceiling offered in the 402: the permit must sign exactly it (as the x402 facilitator requires). */
  maxAmount: bigint
  nowSeconds?: bigint
  /** Time settlement needs before the deadline; default 6 s, as the x402 reference facilitator. */
  minValidSeconds?: bigint
  /** A smart-wallet payer's own check of the digest (ERC-1271, ERC-6492 of a deployed wallet). */
  wallet?: WalletDigestVerifier
}): Promise<UptoCheck> {
  const { permit: p } = q
  const now = q.nowSeconds ?? BigInt(Math.floor(Date.now() / 1000))
  if (!sameAddress(p.spender, UPTO_PROXY_ADDRESS)) return { ok: false, reason: 'wrong_spender' }
  if (!sameAddress(p.to, q.treasury)) return { ok: false, reason: 'wrong_recipient' }
  if (!q.facilitators.some((f) => sameAddress(f, p.facilitator)))
    return { ok: false, reason: 'wrong_facilitator' }
  if (!sameAddress(p.token, q.usdc)) return { ok: false, reason: 'wrong_asset' }
  if (p.amount !== q.maxAmount) return { ok: false, reason: 'max_amount_mismatch' }
  if (p.validAfter > now) return { ok: false, reason: 'authorization_not_yet_valid' }
  if (p.deadline < now + (q.minValidSeconds ?? 6n)) return { ok: false, reason: 'authorization_expired' }
  let digest: Uint8Array
  try {
    digest = uptoPermitDigestBytes(q.chainId, p)
  } catch {
    return { ok: false, reason: 'invalid_signature' }
  }
  if (q.signature.length === 132) {
    const signer = await recoverSigner(digest, q.signature).catch(() => null)
    if (signer && sameAddress(signer, p.from)) return { ok: true, payer: p.from, signature: q.signature }
  }
  if (!q.wallet) return { ok: false, reason: 'invalid_signature' }
  // Not the key of `from`: maybe `from` is a contract wallet.
  const asked = await q.wallet({ address: p.from, hash: bytesToHex(digest), signature: q.signature })
  if (asked.ok) return { ok: true, payer: p.from, signature: asked.signature }
  // Permit2 asks the wallet at settlement, which nothing deploys for upto: any wallet with no code is refused.
  const reason =
    asked.reason === 'smart_wallet_factory_not_allowed' ? 'smart_wallet_not_deployed' : asked.reason
  return { ok: false, reason }
}

export type SponsoredApprovalFailure =
  | 'eip2612_from_mismatch'
  | 'eip2612_asset_mismatch'
  | 'eip2612_spender_not_permit2'
  | 'permit2_2612_amount_mismatch'
  | 'eip2612_deadline_expired'
  | 'invalid_eip2612_signature'

/**
 * The local half of an `eip2612GasSponsoring` approval (no RPC; its nonce is the chain's, checked by the
 * UptoChainChecker): it approves Permit2 for the upto permit's own payer and token, for exactly its maximum
 * (the proxy's settleWithPermit refuses any other value), is valid long enough to settle, and is signed by
 * the payer over the token's EIP-712 domain. Reasons as the published @x402/evm facilitator names them.
 * Rare next to the permit itself (a payer's payments without an approval), so the digest is viem's.
 */
export async function verifySponsoredApproval(q: {
  chainId: number
  token: { address: Address; name: string; version: string }
  permit: Pick<UptoPermit, 'from' | 'token' | 'amount'>
  approval: SponsoredApproval
  nowSeconds?: bigint
}): Promise<{ ok: true } | { ok: false; reason: SponsoredApprovalFailure }> {
  const a = q.approval
  const now = q.nowSeconds ?? BigInt(Math.floor(Date.now() / 1000))
  if (!sameAddress(a.from, q.permit.from)) return { ok: false, reason: 'eip2612_from_mismatch' }
  if (!sameAddress(a.asset, q.permit.token) || !sameAddress(a.asset, q.token.address))
    return { ok: false, reason: 'eip2612_asset_mismatch' }
  if (!sameAddress(a.spender, PERMIT2_ADDRESS)) return { ok: false, reason: 'eip2612_spender_not_permit2' }
  if (a.value !== q.permit.amount) return { ok: false, reason: 'permit2_2612_amount_mismatch' }
  if (a.deadline < now + 6n) return { ok: false, reason: 'eip2612_deadline_expired' }
  if (a.signature.length !== 132) return { ok: false, reason: 'invalid_eip2612_signature' }
  let signer: Address | null
  try {
    const digest = hashTypedData({
      domain: {
        name: q.token.name,
        version: q.token.version,
        chainId: q.chainId,
        verifyingContract: getAddress(q.token.address),
      },
      types: eip2612PermitTypes,
      primaryType: 'Permit',
      message: {
        owner: getAddress(a.from),
        spender: PERMIT2_ADDRESS,
        value: a.value,
        nonce: a.nonce,
        deadline: a.deadline,
      },
    })
    signer = await recoverSigner(hexToBytes(digest), a.signature)
  } catch {
    return { ok: false, reason: 'invalid_eip2612_signature' }
  }
  if (!signer || !sameAddress(signer, a.from)) return { ok: false, reason: 'invalid_eip2612_signature' }
  return { ok: true }
}

const eip2612PermitTypes = {
  Permit: [
    { name: 'owner', type: 'address' },
    { name: 'spender', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'nonce', type: 'uint256' },
    { name: 'deadline', type: 'uint256' },
  ],
} as const

export const permit2Abi = parseAbi([
  'function nonceBitmap(address owner, uint256 wordPos) view returns (uint256)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function invalidateUnorderedNonces(uint256 wordPos, uint256 mask)',
])

const erc20Abi = parseAbi([
  'function balanceOf(address owner) view returns (uint256)',
  'function allowance(address owner, address spender) view returns (uint256)',
  'function nonces(address owner) view returns (uint256)',
])

/** True when Permit2 has spent (or the owner invalidated) this unordered nonce. */
export async function isPermit2NonceUsed(
  client: Client,
  q: { owner: Address; nonce: bigint },
): Promise<boolean> {
  const word = await readContract(client, {
    address: PERMIT2_ADDRESS,
    abi: permit2Abi,
    functionName: 'nonceBitmap',
    args: [q.owner, q.nonce >> 8n],
  })
  return ((word >> (q.nonce & 0xffn)) & 1n) === 1n
}

export type UptoChainCheck =
  /** balance: as read, with the block it reflects, for the claim's payer reservation (src/books/claims.ts). */
  | { ok: true; balance: BalanceRead }
  | {
      ok: false
      reason:
        | 'proof_already_used'
        | 'insufficient_funds'
        | 'permit2_allowance_required'
        | 'permit2_allowance_pending'
        | 'eip2612_nonce_mismatch'
        | 'rpc_unavailable'
    }

export type UptoChainChecker = (
  permit: Pick<UptoPermit, 'from' | 'nonce' | 'amount'>,
  /** Its eip2612GasSponsoring approval (verified locally); null: none. */
  approval?: Pick<SponsoredApproval, 'nonce' | 'value'> | null,
) => Promise<UptoChainCheck>

/**
 * The reads a check needs: the token's balance and allowance (to Permit2), Permit2's nonce word. The hot
 * path passes the chain's TokenReads (hand-encoded eth_calls, batched per event-loop turn, one HTTP request).
 */
export type UptoReads = Pick<
  TokenReads,
  'spendable' | 'allowance' | 'nonceBitmap' | 'blockNumber' | 'permitNonce'
>

/** One payer's balance and Permit2 allowance read in flight, and what the checks that joined it accepted. */
interface SharedFunds {
  funds: Promise<{ balance: BalanceRead; allowance: bigint }>
  accepted: bigint
  /** A check accepted a sponsored approval: it will set the allowance, so no other permit may count on it. */
  sponsored: boolean
}

/**
 * What only the chain knows: the nonce is unspent, and the payer holds and has approved Permit2 for the
 * maximum (what settlement may take). The checks of one payer share the balance and allowance read in
 * flight, and what they accept against it together never exceeds it: a burst of concurrent permits whose
 * maxima add up to more than the wallet holds is served up to what it holds (checked one by one against the
 * same read, every one would pass, and the settlements past the balance would fail unpaid). That bounds a
 * burst on one instance only: permits checked after the read came back, or on another instance, are bounded
 * by the claim's payer reservation (src/books/claims.ts), for which the balance is returned with its block.
 * A failed read is `rpc_unavailable`.
 */
export function createUptoChainChecker(reads: UptoReads): UptoChainChecker {
  const shared = new Map<string, SharedFunds>()
  const join = (from: Address): SharedFunds => {
    const key = from.toLowerCase()
    const joined = shared.get(key)
    if (joined) return joined
    const read: SharedFunds = {
      // The head first, then the balance, in one JSON-RPC batch, as for an exact authorization
      // (src/chain/check-authorization.ts): the balance reflects at least the block before that head.
      funds: Promise.all([
        reads.blockNumber(),
        // 0 for an account the token blacklists: Permit2's transfer from it would revert.
        reads.spendable(from),
        reads.allowance(from, PERMIT2_ADDRESS),
      ]).then(([head, atomic, allowance]) => ({
        balance: { atomic, block: head > 0n ? head - 1n : 0n },
        allowance,
      })),
      accepted: 0n,
      sponsored: false,
    }
    shared.set(key, read)
    // Registered before any check awaits it, so it runs first: a later check starts a fresh read.
    const leave = () => {
      if (shared.get(key) === read) shared.delete(key)
    }
    read.funds.then(leave, leave)
    return read
  }
  return async (permit, approval = null) => {
    const read = join(permit.from)
    try {
      const [used, funds, approvalNonce] = await Promise.all([
        reads
          .nonceBitmap(PERMIT2_ADDRESS, permit.from, permit.nonce >> 8n)
          .then((word) => ((word >> (permit.nonce & 0xffn)) & 1n) === 1n),
        read.funds,
        approval === null ? null : reads.permitNonce(permit.from),
      ])
      if (used) return { ok: false, reason: 'proof_already_used' }
      // Checks resume one at a time, in the order they joined: each sees what the earlier ones accepted.
      if (funds.balance.atomic - read.accepted < permit.amount)
        return { ok: false, reason: 'insufficient_funds' }
      // A sponsored approval sets the allowance when its permit settles: the earlier ones here counted on
      // the allowance it overwrites, and the later ones would count on one it spends.
      if (read.sponsored) return { ok: false, reason: 'permit2_allowance_pending' }
      if (approval !== null) {
        if (approvalNonce !== approval.nonce) return { ok: false, reason: 'eip2612_nonce_mismatch' }
        if (read.accepted > 0n) return { ok: false, reason: 'permit2_allowance_pending' }
        read.sponsored = true
      } else if (funds.allowance - read.accepted < permit.amount)
        return { ok: false, reason: 'permit2_allowance_required' }
      read.accepted += permit.amount
      return { ok: true, balance: funds.balance }
    } catch {
      return { ok: false, reason: 'rpc_unavailable' }
    }
  }
}

/** One check on its own through viem (tests, tools): the chain's half of an upto permit. */
export function checkUptoOnChain(
  client: Client,
  q: { usdc: Address; permit: Pick<UptoPermit, 'from' | 'nonce' | 'amount'> },
): Promise<UptoChainCheck> {
  return createUptoChainChecker({
    // The balance alone (no blacklist read): a check on its own, for tests and tools.
    spendable: (owner) =>
      readContract(client, { address: q.usdc, abi: erc20Abi, functionName: 'balanceOf', args: [owner] }),
    allowance: (owner, spender) =>
      readContract(client, {
        address: q.usdc,
        abi: erc20Abi,
        functionName: 'allowance',
        args: [owner, spender],
      }),
    nonceBitmap: (permit2, owner, wordPos) =>
      readContract(client, {
        address: permit2,
        abi: permit2Abi,
        functionName: 'nonceBitmap',
        args: [owner, wordPos],
      }),
    blockNumber: () => getBlockNumber(client, { cacheTime: 0 }),
    permitNonce: (owner) =>
      readContract(client, { address: q.usdc, abi: erc20Abi, functionName: 'nonces', args: [owner] }),
  })(q.permit)
}
