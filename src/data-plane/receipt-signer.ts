// Signs x402 `offer-receipt` offers and receipts (EIP-712, the format @x402/extensions verifies by recovering
// the signer's address) and tollgate's own final receipt, with one secp256k1 key. Synchronous on purpose:
// offers are signed while an endpoint's 402 is built, receipts while a paid answer's head is written.
import { type Hex, hashTypedData } from 'viem'
import { privateKeyToAddress } from 'viem/accounts'
import { keccakBytes } from '../chain/keccak.ts'
import { secp256k1 } from '../chain/secp256k1.ts'

export const OFFER_RECEIPT = 'offer-receipt'
/** The extension's payload version (@x402/extensions 2.27). */
const VERSION = 1

// The reference's EIP-712 domains and types: a verifier recomputes exactly these.
const OFFER_DOMAIN = { name: 'x402 offer', version: '1', chainId: 1 } as const
const RECEIPT_DOMAIN = { name: 'x402 receipt', version: '1', chainId: 1 } as const
const OFFER_TYPES = {
  Offer: [
    { name: 'version', type: 'uint256' },
    { name: 'resourceUrl', type: 'string' },
    { name: 'scheme', type: 'string' },
    { name: 'network', type: 'string' },
    { name: 'asset', type: 'string' },
    { name: 'payTo', type: 'string' },
    { name: 'amount', type: 'string' },
    { name: 'validUntil', type: 'uint256' },
  ],
} as const
/** tollgate's final receipt: the reference receipt's facts plus what the call delivered and was charged. */
const CALL_RECEIPT_DOMAIN = { name: 'tollgate receipt', version: '1', chainId: 1 } as const
const CALL_RECEIPT_TYPES = {
  CallReceipt: [
    { name: 'receiptId', type: 'string' },
    { name: 'resourceUrl', type: 'string' },
    { name: 'network', type: 'string' },
    { name: 'payer', type: 'string' },
    { name: 'scheme', type: 'string' },
    { name: 'amountAtomic', type: 'string' },
    { name: 'upstreamStatus', type: 'uint256' },
    { name: 'bodySha256', type: 'string' },
    { name: 'bodyBytes', type: 'uint256' },
    { name: 'usage', type: 'string' },
    { name: 'agent', type: 'string' },
    { name: 'settlementTx', type: 'string' },
    { name: 'issuedAt', type: 'uint256' },
  ],
} as const

export interface OfferPayload {
  version: number
  resourceUrl: string
  scheme: string
  network: string
  asset: string
  payTo: string
  amount: string
  validUntil: number
}

export interface ReceiptPayload {
  version: number
  network: string
  resourceUrl: string
  payer: string
  issuedAt: number
  transaction: string
}

export interface CallReceiptPayload {
  receiptId: string
  resourceUrl: string
  network: string
  payer: string
  scheme: string
  amountAtomic: string
  upstreamStatus: number
  /** hex SHA-256 of the body bytes as delivered to the payer; '' when the answer did not end. */
  bodySha256: string
  bodyBytes: number
  /** The measured usage as JSON text ('' for fixed and rules prices). */
  usage: string
  /** Who called and the rule that priced the call, as JSON text ('' on an endpoint without identity rules). */
  agent: string
  /** The transaction that used the payment on chain, once it did; '' before. */
  settlementTx: string
  issuedAt: number
}

// EIP-712 by hand for the one type signed per request: keccak(0x1901 ‖ domain separator ‖ struct hash), the
// struct hash over the type hash, uint256s as 32-byte words and strings as their keccak (the unit test holds
// it equal to viem's hashTypedData and to the published verifier).
const RECEIPT_TYPE_HASH = keccakBytes(
  'Receipt(uint256 version,string network,string resourceUrl,string payer,uint256 issuedAt,string transaction)',
)
const RECEIPT_DOMAIN_SEPARATOR = Buffer.from(
  keccakBytes(
    Buffer.concat([
      keccakBytes('EIP712Domain(string name,string version,uint256 chainId)'),
      keccakBytes(RECEIPT_DOMAIN.name),
      keccakBytes(RECEIPT_DOMAIN.version),
      word(BigInt(RECEIPT_DOMAIN.chainId)),
    ]),
  ),
)

function word(n: bigint): Buffer {
  return Buffer.from(n.toString(16).padStart(64, '0'), 'hex')
}

export function receiptDigest(p: ReceiptPayload): Hex {
  return `0x${Buffer.from(receiptDigestBytes(p)).toString('hex')}`
}

function receiptDigestBytes(p: ReceiptPayload): Uint8Array {
  const struct = keccakBytes(
    Buffer.concat([
      RECEIPT_TYPE_HASH,
      word(BigInt(p.version)),
      repeatedKeccak(p.network),
      repeatedKeccak(p.resourceUrl),
      repeatedKeccak(p.payer),
      word(BigInt(p.issuedAt)),
      keccakBytes(p.transaction),
    ]),
  )
  return keccakBytes(Buffer.concat([Buffer.from([0x19, 0x01]), RECEIPT_DOMAIN_SEPARATOR, struct]))
}

/**
 * keccak of a string every receipt of an endpoint or payer repeats (the network, the resource URL, the
 * payer): hashed once, then looked up (a hash object and its digest cost more than the look-up). Bounded:
 * cleared when full, so varied payers cannot grow it.
 */
const repeated = new Map<string, Uint8Array>()
const REPEATED_MAX = 4_096
function repeatedKeccak(text: string): Uint8Array {
  let hash = repeated.get(text)
  if (hash === undefined) {
    if (repeated.size >= REPEATED_MAX) repeated.clear()
    hash = keccakBytes(text)
    repeated.set(text, hash)
  }
  return hash
}

export interface ReceiptKeys {
  /** The signing key (secret: from the environment only). */
  privateKey: Hex
  /** Addresses of earlier signing keys, still listed so receipts they signed keep verifying. */
  previous: readonly string[]
}

export class ReceiptSigner {
  readonly address: `0x${string}`
  /** did:pkh names the key by its address, which EIP-712 verification recovers. */
  readonly kid: string
  private readonly key: Uint8Array

  constructor(private readonly keys: ReceiptKeys) {
    if (secp256k1 === null) throw new Error('signed receipts need the secp256k1 package')
    this.address = privateKeyToAddress(keys.privateKey)
    this.kid = `did:pkh:eip155:1:${this.address}`
    this.key = Buffer.from(keys.privateKey.slice(2), 'hex')
  }

  offer(acceptIndex: number, payload: Omit<OfferPayload, 'version'>) {
    const full: OfferPayload = { version: VERSION, ...payload }
    const digest = hashTypedData({
      domain: OFFER_DOMAIN,
      types: OFFER_TYPES,
      primaryType: 'Offer',
      message: { ...full, version: BigInt(full.version), validUntil: BigInt(full.validUntil) },
    })
    return { format: 'eip712' as const, acceptIndex, payload: full, signature: this.sign(digest) }
  }

  /** Signed once per paid answer: the digest is encoded by hand (viem's generic encoder costs ~0.3 ms). */
  receipt(payload: Omit<ReceiptPayload, 'version'>) {
    const full: ReceiptPayload = { version: VERSION, ...payload }
    return { format: 'eip712' as const, payload: full, signature: this.signBytes(receiptDigestBytes(full)) }
  }

  callReceipt(payload: CallReceiptPayload) {
    const digest = hashTypedData({
      domain: CALL_RECEIPT_DOMAIN,
      types: CALL_RECEIPT_TYPES,
      primaryType: 'CallReceipt',
      message: {
        ...payload,
        upstreamStatus: BigInt(payload.upstreamStatus),
        bodyBytes: BigInt(payload.bodyBytes),
        issuedAt: BigInt(payload.issuedAt),
      },
    })
    return { format: 'eip712' as const, domain: CALL_RECEIPT_DOMAIN, payload, signature: this.sign(digest) }
  }

  /** The public side, served at /.well-known/x402-receipt-keys.json. */
  publicKeys() {
    return {
      format: 'eip712',
      current: { kid: this.kid, address: this.address },
      // Rotation: a new key signs from now on; receipts signed by an earlier one verify against this list.
      previous: this.keys.previous.map((address) => ({ kid: `did:pkh:eip155:1:${address}`, address })),
      domains: { offer: OFFER_DOMAIN, receipt: RECEIPT_DOMAIN, call_receipt: CALL_RECEIPT_DOMAIN },
      call_receipt_types: CALL_RECEIPT_TYPES,
    }
  }

  private sign(digest: Hex): Hex {
    return this.signBytes(Buffer.from(digest.slice(2), 'hex'))
  }

  /**
   * r ‖ s ‖ v with v 27 or 28, as viem's serializeSignature writes it (the unit test holds them equal);
   * spelled out because serializeSignature parses r and s into a signature object first.
   */
  private signBytes(digest: Uint8Array): Hex {
    const { signature, recid } = secp256k1!.lib.ecdsaSign(digest, this.key)
    return `0x${Buffer.from(signature.buffer, signature.byteOffset, 64).toString('hex')}${recid === 0 ? '1b' : '1c'}`
  }
}

/**
 * The `offer-receipt` extension of a 402: one signed offer per x402 v2 requirement, valid until validUntil
 * (unix seconds). Built with the rest of the 402, once per endpoint version and cache period.
 */
export function signedOffers(
  signer: ReceiptSigner,
  resourceUrl: string,
  accepts: ReadonlyArray<{ scheme: string; network: string; asset: string; payTo: string; amount: string }>,
  validUntil: number,
) {
  return {
    info: {
      offers: accepts.map((a, i) =>
        signer.offer(i, {
          resourceUrl,
          scheme: a.scheme,
          network: a.network,
          asset: a.asset,
          payTo: a.payTo,
          amount: a.amount,
          validUntil,
        }),
      ),
    },
    schema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: { offers: { type: 'array', items: { type: 'object' } } },
      required: ['offers'],
    },
  }
}

/**
 * Adds the signed receipt to a paid answer's x402 receipt header (base64 JSON, v2 PAYMENT-RESPONSE or v1
 * X-PAYMENT-RESPONSE), where the published client looks for it. Other headers pass unchanged.
 */
export function withSignedReceipt(
  header: [string, string],
  signer: ReceiptSigner,
  facts: { resourceUrl: string; network: string; payer: string; nowMs: number },
): [string, string] {
  if (header[0] !== 'payment-response' && header[0] !== 'x-payment-response') return header
  let body: Record<string, unknown>
  try {
    body = JSON.parse(Buffer.from(header[1], 'base64').toString('utf8'))
  } catch {
    return header
  }
  if (body === null || typeof body !== 'object') return header
  const receipt = signer.receipt({
    network: facts.network,
    resourceUrl: facts.resourceUrl,
    payer: facts.payer,
    issuedAt: Math.floor(facts.nowMs / 1000),
    // Settled before this answer: the mined transaction is signed with it. Settled later (batched) or only
    // sent: '' here, and the receipt URL shows the transaction once the chain used the payment.
    transaction: body.success === true && typeof body.transaction === 'string' ? body.transaction : '',
  })
  const extensions = {
    ...(body.extensions as Record<string, unknown> | undefined),
    [OFFER_RECEIPT]: { info: { receipt } },
  }
  return [header[0], Buffer.from(JSON.stringify({ ...body, extensions })).toString('base64')]
}
