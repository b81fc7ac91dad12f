// The sign-in check of passes against the published sign-in-with-x code: the EIP-4361 text tollgate builds
// for its fast recovery is the published formatter's, line for line, in every shape a payload takes; and a
// message signed by the published client helper verifies, while another address, chain, origin or endpoint
// does not. A signature no key recovers to the address goes to the wallet check (contract wallets), whose
// chain read is bounded in time: a node that does not answer is a 503 to retry, not a refusal.
import {
  createSIWxPayload,
  encodeSIWxHeader,
  formatSIWEMessage,
  type SIWxPayload,
} from '@x402/extensions/sign-in-with-x'
import { createClient, custom } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { ChainReadTimeout, verifyWalletMessage } from '../../src/chain/verify-wallet-message.ts'
import { eip4361, SignIn } from '../../src/data-plane/sign-in.ts'

const ORIGIN = 'http://127.0.0.1:8080'
const RESOURCE = `${ORIGIN}/m/ep_1`
const signIn = new SignIn({ publicUrl: () => ORIGIN, caip2: 'eip155:84532', maxAgeMs: 300_000 })
const account = privateKeyToAccount(generatePrivateKey())

function challenge(): Record<string, unknown> {
  return JSON.parse(signIn.challengeJson(RESOURCE, Date.now())).info
}

async function signed(info: Record<string, unknown>): Promise<SIWxPayload> {
  return createSIWxPayload({ ...info, chainId: 'eip155:84532', type: 'eip191' } as never, account, RESOURCE)
}

describe('sign-in for passes', () => {
  it('builds the EIP-4361 text exactly as the published formatter, whatever fields are present', async () => {
    const base = challenge()
    const shapes = [
      base,
      { ...base, statement: undefined },
      { ...base, resources: undefined, expirationTime: undefined },
      { ...base, notBefore: new Date(Date.now() - 1000).toISOString(), requestId: 'r-1' },
      { ...base, resources: [RESOURCE, `${ORIGIN}/other`], requestId: '' },
    ]
    for (const shape of shapes) {
      const payload = await signed(shape)
      expect(eip4361(payload)).toBe(formatSIWEMessage({ ...payload, type: 'eip191' }, payload.address))
      const result = await signIn.verify(encodeSIWxHeader(payload), RESOURCE)
      expect(result).toMatchObject({ ok: true, payer: account.address.toLowerCase() })
    }
  })

  it('each 402 gets its own nonce; a message is bound to its signer, chain, origin and endpoint', async () => {
    expect(challenge().nonce).not.toBe(challenge().nonce)
    const payload = await signed(challenge())
    const other = privateKeyToAccount(generatePrivateKey()).address
    const refused = async (p: SIWxPayload, resource = RESOURCE) =>
      ((await signIn.verify(encodeSIWxHeader(p), resource)) as { reason?: string }).reason
    expect(await refused({ ...payload, address: other })).toBe('invalid_siwx_signature')
    expect(await refused({ ...payload, nonce: 'b'.repeat(32) })).toBe('invalid_siwx_signature')
    expect(await refused({ ...payload, nonce: 'short' })).toBe('invalid_siwx_nonce')
    expect(await refused({ ...payload, chainId: 'eip155:1' })).toBe('invalid_siwx_chain_id')
    expect(await refused({ ...payload, domain: 'evil.example' })).toBe('invalid_siwx_domain_mismatch')
    expect(await refused(payload, `${ORIGIN}/m/ep_2`)).toBe('invalid_siwx_uri_mismatch')
    expect(await refused({ ...payload, signature: '0x1234' })).toBe('invalid_siwx_signature')
  })

  it('asks the wallet only when recovery fails; a chain that does not answer in time is unavailable', async () => {
    const asked: string[] = []
    // A node that never answers: the wallet check gives up after its bound.
    const silent = createClient({ transport: custom({ request: () => new Promise(() => {}) }) })
    const bounded = new SignIn({
      publicUrl: () => ORIGIN,
      caip2: 'eip155:84532',
      maxAgeMs: 300_000,
      verifyWallet: (q) => {
        asked.push(q.address)
        return verifyWalletMessage(silent, { ...q, timeoutMs: 50 })
      },
    })
    const payload = await signed(challenge())
    // An EOA's own signature: recovered, the chain is not asked.
    expect(await bounded.verify(encodeSIWxHeader(payload), RESOURCE)).toMatchObject({ ok: true })
    expect(asked).toEqual([])
    // Claimed by another address (a contract wallet, perhaps): asked, and the silence is a 503.
    const other = privateKeyToAccount(generatePrivateKey()).address
    const started = performance.now()
    expect(await bounded.verify(encodeSIWxHeader({ ...payload, address: other }), RESOURCE)).toMatchObject({
      ok: 'unavailable',
      reason: 'invalid_siwx_verifier_error',
    })
    expect(performance.now() - started).toBeLessThan(2_000)
    expect(asked).toEqual([other])
    await expect(
      verifyWalletMessage(silent, {
        address: other,
        message: 'm',
        signature: payload.signature as never,
        timeoutMs: 20,
      }),
    ).rejects.toBeInstanceOf(ChainReadTimeout)
  })
})
