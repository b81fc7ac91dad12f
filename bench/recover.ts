// npm run bench -- recover: EIP-3009 signer recoveries per CPU second (one core; CPU time, so other work on
// a shared machine does not count), viem's generic typed-data recovery against the verifier's path: the
// hand-built digest and recoverSigner, whose backend (native libsecp256k1, elliptic or viem) is reported; and
// the treasury's transaction signing (a settlement or payout per call), viem's account against signingAccount;
// and a Web Bot Auth signature's Ed25519 verification, node:crypto against libsodium (src/identity/ed25519.ts).
import { generateKeyPairSync, sign } from 'node:crypto'
import { recoverTypedDataAddress } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import {
  authorizationTypedData,
  createAuthorizationNonce,
  signTransferAuthorization,
} from '../src/chain/authorization.ts'
import { keccakBackend } from '../src/chain/keccak.ts'
import {
  authorizationDigest,
  domainSeparator,
  recoverSigner,
  recoveryBackend,
} from '../src/chain/recover-authorization.ts'
import { signingAccount, signingBackend } from '../src/chain/signing-account.ts'
import { ed25519Backend, verifyEd25519, verifyWithNode } from '../src/identity/ed25519.ts'

export interface RecoveryRates {
  viem_per_s: number
  fast_per_s: number
  fast_backend: string
  keccak_backend: string
  sign_viem_per_s: number
  sign_fast_per_s: number
  sign_backend: string
  /** Web Bot Auth: Ed25519 verifications of a signature base, node:crypto against the verifier's backend. */
  ed25519_node_per_s: number
  ed25519_fast_per_s: number
  ed25519_backend: string
}

export async function measureRecovery(count = 2_000): Promise<RecoveryRates> {
  const usdc = { address: '0x5FbDB2315678afecb367f032d93F642f64180aa3' as const, name: 'USDC', version: '2' }
  const chainId = 31337
  const account = privateKeyToAccount(generatePrivateKey())
  const signed = await Promise.all(
    Array.from({ length: count }, () =>
      signTransferAuthorization(account, {
        usdc,
        chainId,
        to: usdc.address,
        value: 1000n,
        validAfter: 0n,
        validBefore: 4_000_000_000n,
        nonce: createAuthorizationNonce(),
      }),
    ),
  )
  const viemPerS = await perCpuSecond(count, async () => {
    for (const s of signed) {
      await recoverTypedDataAddress({
        ...authorizationTypedData({ usdc, chainId }, s.authorization),
        signature: s.signature,
      })
    }
  })
  const expected = account.address.toLowerCase()
  const fastPerS = await perCpuSecond(count, async () => {
    for (const s of signed) {
      const separator = domainSeparator({ ...usdc, chainId, verifyingContract: usdc.address })
      const signer = await recoverSigner(authorizationDigest(separator, s.authorization), s.signature)
      if (signer !== expected) throw new Error('fast recovery disagrees')
    }
  })
  const key = generatePrivateKey()
  const tx = (nonce: number) => ({
    type: 'eip1559' as const,
    chainId,
    to: usdc.address,
    data: `0xa9059cbb${'00'.repeat(64)}` as const,
    nonce,
    gas: 60_000n,
    maxFeePerGas: 2_000_000_000n,
    maxPriorityFeePerGas: 1_000_000n,
    value: 0n,
  })
  const signWith = (a: ReturnType<typeof privateKeyToAccount>) => async () => {
    for (let i = 0; i < count; i++) await a.signTransaction(tx(i))
  }
  return {
    viem_per_s: viemPerS,
    fast_per_s: fastPerS,
    fast_backend: recoveryBackend,
    keccak_backend: keccakBackend,
    sign_viem_per_s: await perCpuSecond(count, signWith(privateKeyToAccount(key))),
    sign_fast_per_s: await perCpuSecond(count, signWith(signingAccount(key))),
    sign_backend: signingBackend,
    ...(await measureEd25519(count)),
  }
}

/** Ed25519 verifications per CPU second of a Web Bot Auth signature base (src/identity/ed25519.ts). */
async function measureEd25519(count: number) {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const base = Buffer.from(
    '"@authority": 127.0.0.1:8080\n"signature-agent": "https://agent.example"\n' +
      '"@signature-params": ("@authority" "signature-agent");created=1764547200;expires=1764547500;' +
      'keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";nonce="ZO3/XMEZjrvSnLtAP9M7jK0WGQf3J+pbmQRUpKDhF9/jsNCWqUh2sq+TH4WTX3/GpNoSZUa8eNWMKqxWp2/c2g==";tag="web-bot-auth"',
  )
  const signature = sign(null, base, privateKey)
  const times = count * 4
  const run = (verify: typeof verifyEd25519) => async () => {
    for (let i = 0; i < times; i++)
      if (!verify(publicKey, base, signature)) throw new Error('ed25519 refused')
  }
  return {
    ed25519_node_per_s: await perCpuSecond(times, run(verifyWithNode)),
    ed25519_fast_per_s: await perCpuSecond(times, run(verifyEd25519)),
    ed25519_backend: ed25519Backend,
  }
}

async function perCpuSecond(count: number, work: () => Promise<void>): Promise<number> {
  const start = process.cpuUsage()
  await work()
  const used = process.cpuUsage(start)
  return Math.round(count / ((used.user + used.system) / 1e6))
}

if (import.meta.url === `file://${process.argv[1]}`) {
  measureRecovery().then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
}
