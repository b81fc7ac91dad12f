// npm run bench -- recover: EIP-3009 signer recoveries per CPU second (one core; CPU time, so other work on
// a shared machine does not count), viem's generic typed-data recovery against the verifier's path: the
// hand-built digest and recoverSigner, whose backend (native libsecp256k1, elliptic or viem) is reported; and
// the treasury's transaction signing (a settlement or payout per call), viem's account against signingAccount.
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

export interface RecoveryRates {
  viem_per_s: number
  fast_per_s: number
  fast_backend: string
  keccak_backend: string
  sign_viem_per_s: number
  sign_fast_per_s: number
  sign_backend: string
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
