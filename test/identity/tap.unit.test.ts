// Visa Trusted Agent Protocol on the Web Bot Auth base: mppx's TAP client, unchanged, signs; tollgate checks
// the signature, its purpose (tag), its binding to this merchant (@authority) and operation (@path), and
// TAP's 8-minute lifetime. mppx's own TAP verifier reads the same requests as the reference.
import { createPublicKey, sign as nodeSign, type webcrypto } from 'node:crypto'
import { Store } from 'mppx/attestation'
import { Client, Server } from 'mppx/attestation/tap'
import { beforeAll, describe, expect, it } from 'vitest'
import { buildSignatureBase } from '../../src/identity/signature-base.ts'
import { type InnerList, parseDictionary, serializeInnerList } from '../../src/identity/structured-fields.ts'
import { type ConfiguredKey, checkSignature, forPayment } from '../../src/identity/verify-request.ts'
import { viewOf } from '../helpers/request-view.ts'

const MERCHANT = 'https://shop.example'
const KEY_ID = 'visa-tap-key-1'
let pair: webcrypto.CryptoKeyPair
let keys: Map<string, ConfiguredKey>

beforeAll(async () => {
  pair = (await crypto.subtle.generateKey({ name: 'Ed25519' }, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair
  // As an operator configures a TAP key in identity.keys: a PEM public key under the TAP key id.
  const spki = Buffer.from(await crypto.subtle.exportKey('spki', pair.publicKey))
  const key = createPublicKey({ key: spki, format: 'der', type: 'spki' })
  keys = new Map([[KEY_ID, { name: 'visa', keyid: KEY_ID, alg: 'ed25519', key }]])
})

const policy = (authorities: string[] = []) => ({ maxLifetimeS: 86_400, clockSkewS: 5, authorities })

const tap = (intent: 'browse' | 'payment', url = `${MERCHANT}/m/ep_1`) =>
  Client.signer({ intent, key: pair.privateKey, keyId: KEY_ID }).sign(new Request(url))

const check = (req: Request, host?: string, authorities?: string[]) =>
  checkSignature({ directories: null, keys, policy: policy(authorities) }, viewOf(req, host))

/** A TAP-tagged signature mppx's client would refuse to make: the components and lifetime given. */
function handSigned(components: string[], lifetimeS: number): Request {
  const created = Math.floor(Date.now() / 1000)
  const input = parseDictionary(
    `tap=(${components.map((c) => `"${c}"`).join(' ')});created=${created};expires=${created + lifetimeS};keyid="${KEY_ID}";alg="ed25519";nonce="n${created}${Math.random()}";tag="agent-payer-auth"`,
  )!.get('tap') as InnerList
  const url = `${MERCHANT}/m/ep_1`
  const base = buildSignatureBase(viewOf(new Request(url)), input)
  if (!base.ok) throw new Error(base.reason)
  const sig = nodeSign(null, Buffer.from(base.base), privatePem).toString('base64')
  return new Request(url, {
    headers: { 'signature-input': `tap=${serializeInnerList(input)}`, signature: `tap=:${sig}:` },
  })
}
let privatePem: string
beforeAll(async () => {
  const pkcs8 = Buffer.from(await crypto.subtle.exportKey('pkcs8', pair.privateKey))
  privatePem = `-----BEGIN PRIVATE KEY-----\n${pkcs8.toString('base64')}\n-----END PRIVATE KEY-----\n`
})

describe('Visa TAP signatures (mppx TAP client)', () => {
  it('verifies payer and browser signatures and reads their purpose; mppx agrees', async () => {
    const verifier = Server.verifier({
      keyResolver: async ({ keyId }) => (keyId === KEY_ID ? pair.publicKey : undefined),
      nonceStore: Store.memory(),
    })
    for (const intent of ['payment', 'browse'] as const) {
      const req = await tap(intent)
      expect(check(req)).toMatchObject({ status: 'verified', signer: 'visa', keyid: KEY_ID, purpose: intent })
      expect(await verifier.verify(req)).toMatchObject({
        status: 'verified',
        value: { keyId: KEY_ID, intent },
      })
    }
  })

  it('a browsing signature does not pay: on a paying call it is wrong_purpose', async () => {
    expect(forPayment(check(await tap('browse')))).toEqual({ status: 'failed', reason: 'wrong_purpose' })
    expect(forPayment(check(await tap('payment'))).status).toBe('verified')
  })

  it('is bound to the merchant and the path it was made for', async () => {
    const other = await tap('payment', 'https://other-shop.example/m/ep_1')
    expect(check(other, 'shop.example')).toEqual({ status: 'failed', reason: 'bad_signature' })
    expect(check(other, undefined, ['shop.example'])).toEqual({ status: 'failed', reason: 'wrong_authority' })
    const req = await tap('payment')
    const elsewhere = new Request(`${MERCHANT}/m/ep_2`, { headers: req.headers })
    expect(check(elsewhere)).toEqual({ status: 'failed', reason: 'bad_signature' })
  })

  it('refuses a TAP signature that skips @path or outlives 8 minutes', () => {
    expect(check(handSigned(['@authority', '@path'], 480)).status).toBe('verified')
    expect(check(handSigned(['@authority'], 480))).toEqual({
      status: 'failed',
      reason: 'tap_binding_not_covered',
    })
    expect(check(handSigned(['@authority', '@path'], 481))).toEqual({
      status: 'failed',
      reason: 'lifetime_too_long',
    })
  })
})
