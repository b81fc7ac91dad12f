// x402 `sign-in-with-x` (CAIP-122; EIP-4361 messages for EVM wallets) for passes: the challenge a pass
// endpoint's 402 declares (fresh nonce, issuedAt and expiry per answer, bound to the configured public
// origin and the endpoint's resource URI), and the check of the SIGN-IN-WITH-X header a returning buyer
// sends, with the published server helpers of @x402/extensions: fields (domain, URI origin, issuedAt age,
// expiry, notBefore), then the signature: an EOA's by EIP-191 recovery, without RPC; otherwise, given a
// wallet check, by the wallet on chain (ERC-1271 contract wallets, ERC-6492 wallets not deployed yet), as the
// published verifier does with a viem verifyMessage. Nonce uniqueness is the draw's (src/books/passes.ts
// records it in the same statement, on any instance).
import { randomBytes } from 'node:crypto'
import {
  buildSIWxSchema,
  formatSIWEMessage,
  parseSIWxHeader,
  type SIWxPayload,
  validateSIWxMessage,
  verifySIWxSignature,
} from '@x402/extensions/sign-in-with-x'
import { keccakBytes } from '../chain/keccak.ts'
import { recoverSigner } from '../chain/recover-authorization.ts'

export const SIGN_IN_HEADER = 'sign-in-with-x'

export interface SignInOptions {
  /** The configured public origin (never the request's Host: the spec binds messages to it). */
  publicUrl(): string
  /** CAIP-2 of the chain tollgate takes payments on: the one chain a sign-in may name. */
  caip2: string
  /** How old a message's issuedAt may be (the published default: 5 minutes). */
  maxAgeMs: number
  /**
   * The signature as the claimed wallet judges it, on chain (one read, bounded in time; it throws when the
   * chain does not answer). Asked only when recovery does not give the claimed address. Absent: EOAs only.
   */
  verifyWallet?: (q: {
    address: `0x${string}`
    message: string
    signature: `0x${string}`
  }) => Promise<boolean>
}

/** A sign-in that checked out: who signed, and the nonce the draw records until the message is too old. */
export type SignInResult =
  | { ok: true; payer: `0x${string}`; nonce: string; nonceExpiresAt: Date }
  | { ok: false; reason: string }
  /** The wallet could not be asked (the chain did not answer in time): the same sign-in may be retried. */
  | { ok: 'unavailable'; reason: 'invalid_siwx_verifier_error'; message: string }

const SCHEMA_JSON = JSON.stringify(buildSIWxSchema())
const NONCE = /^[0-9a-fA-F]{32}$/

export class SignIn {
  private origin: URL | null = null
  private readonly chainsJson: string

  constructor(private readonly options: SignInOptions) {
    this.chainsJson = JSON.stringify([{ chainId: options.caip2, type: 'eip191' }])
  }

  /** The public origin, read once it is known (the service learns its port when it listens). */
  private originUrl(): URL {
    if (this.origin === null) this.origin = new URL(this.options.publicUrl())
    return this.origin
  }

  /**
   * The extension's JSON for one 402 of `resourceUrl`: a fresh 32-hex nonce (the spec: the server MUST
   * generate it, unique per challenge), issuedAt now, expiry at the accepted age.
   */
  challengeJson(resourceUrl: string, nowMs: number): string {
    const uri = JSON.stringify(resourceUrl)
    const info =
      `{"domain":${JSON.stringify(this.originUrl().host)},"uri":${uri},"version":"1",` +
      `"nonce":"${randomBytes(16).toString('hex')}","issuedAt":"${new Date(nowMs).toISOString()}",` +
      `"expirationTime":"${new Date(nowMs + this.options.maxAgeMs).toISOString()}",` +
      `"statement":"Sign in to use your pass","resources":[${uri}]}`
    return `{"info":${info},"supportedChains":${this.chainsJson},"schema":${SCHEMA_JSON}}`
  }

  /** Reads and checks a SIGN-IN-WITH-X header for a call to `resourceUrl`; refusals are the spec's codes. */
  async verify(header: string, resourceUrl: string): Promise<SignInResult> {
    let payload: SIWxPayload
    try {
      payload = parseSIWxHeader(header)
    } catch {
      return { ok: false, reason: 'invalid_siwx_header' }
    }
    if (payload.chainId !== this.options.caip2) return { ok: false, reason: 'invalid_siwx_chain_id' }
    // The spec's nonce is 32 hex characters of the server's making; anything else is not ours to store.
    if (!NONCE.test(payload.nonce)) return { ok: false, reason: 'invalid_siwx_nonce' }
    const fields = await validateSIWxMessage(payload, this.originUrl(), { maxAge: this.options.maxAgeMs })
    if (!fields.isValid) return { ok: false, reason: fields.invalidReason }
    // The message names this endpoint (the 402's uri): one signed for another endpoint is not this one's.
    if (payload.uri !== resourceUrl && !payload.uri.startsWith(`${resourceUrl}/`))
      return { ok: false, reason: 'invalid_siwx_uri_mismatch' }
    const payer = await signerOf(payload, this.options.verifyWallet)
    if (typeof payer !== 'string') return payer
    const issuedAtMs = Date.parse(payload.issuedAt)
    return {
      ok: true,
      payer,
      nonce: payload.nonce,
      // A message is refused as too old after this anyway: its nonce need not be kept longer.
      nonceExpiresAt: new Date(issuedAtMs + this.options.maxAgeMs + 60_000),
    }
  }
}

/**
 * The wallet that signed the message, or the refusal. A 65-byte signature is recovered through libsecp256k1
 * (src/chain/) over the EIP-4361 text built here as the published formatter builds it; only when that does
 * not give the claimed address is the published formatter itself (a tenth of the speed: it re-parses its
 * own output) asked for the text, so a difference in formatting costs time, never a wrong answer. An EOA
 * (almost every buyer) is settled there, without RPC. Anything else, a contract wallet's signature or a
 * wrong one, goes to the published verifier, with the wallet check when there is one (else it recovers
 * only, as before): a refused signature then costs one chain read.
 */
async function signerOf(
  payload: SIWxPayload,
  verifyWallet: SignInOptions['verifyWallet'],
): Promise<`0x${string}` | Exclude<SignInResult, { ok: true }>> {
  const claimed = payload.address.toLowerCase()
  if (payload.signature.length === 132 && claimed.length === 42) {
    if ((await recoverEip191(eip4361(payload), payload.signature)) === claimed)
      return claimed as `0x${string}`
    let published: string
    try {
      published = formatSIWEMessage({ ...payload, type: 'eip191' }, payload.address)
    } catch {
      return { ok: false, reason: 'invalid_siwx_signature' }
    }
    if ((await recoverEip191(published, payload.signature)) === claimed) return claimed as `0x${string}`
    if (verifyWallet === undefined) return { ok: false, reason: 'invalid_siwx_signature' }
  }
  const verified = await verifySIWxSignature(
    payload,
    verifyWallet === undefined ? undefined : { evmVerifier: verifyWallet },
  )
  if (verified.isValid) return verified.payer.toLowerCase() as `0x${string}`
  // The published verifier's code for a check that threw: with the wallet check, the chain did not answer.
  if (verified.invalidReason === 'invalid_siwx_verifier_error' && verifyWallet !== undefined)
    return { ok: 'unavailable', reason: verified.invalidReason, message: verified.invalidMessage }
  return { ok: false, reason: verified.invalidReason }
}

/** EIP-191 personal-message recovery: keccak("\x19Ethereum Signed Message:\n" + byte length + message). */
function recoverEip191(message: string, signature: string): Promise<string | null> {
  const body = Buffer.from(message, 'utf8')
  const prefix = Buffer.from(`\x19Ethereum Signed Message:\n${body.length}`, 'utf8')
  return recoverSigner(keccakBytes(Buffer.concat([prefix, body])), signature as `0x${string}`)
}

/** The EIP-4361 message of an eip155 payload, line for line as @signinwithethereum/siwe writes it. */
export function eip4361(p: SIWxPayload): string {
  const lines = [
    `URI: ${p.uri}`,
    `Version: ${p.version}`,
    `Chain ID: ${p.chainId.slice(7)}`,
    `Nonce: ${p.nonce}`,
    `Issued At: ${p.issuedAt}`,
  ]
  if (p.expirationTime) lines.push(`Expiration Time: ${p.expirationTime}`)
  if (p.notBefore) lines.push(`Not Before: ${p.notBefore}`)
  if (p.requestId !== undefined) lines.push(`Request ID: ${p.requestId}`)
  if (p.resources) lines.push(['Resources:', ...p.resources.map((r) => `- ${r}`)].join('\n'))
  const head = `${p.domain} wants you to sign in with your Ethereum account:\n${p.address}`
  const intro = p.statement === undefined ? `${head}\n\n` : `${head}\n\n${p.statement}\n`
  return `${intro}\n${lines.join('\n')}`
}
