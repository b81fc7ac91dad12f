// The local chain `NETWORK=local` runs on: anvil, the project's TestUSDC and Disperse deployed from
// account 0 (the treasury), and USDC minted to the demo payers (accounts 1..N) and to the treasury.
import { mkdirSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import {
  type Address,
  createWalletClient,
  defineChain,
  getContractAddress,
  type Hash,
  http,
  parseAbi,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { getCode, waitForTransactionReceipt } from 'viem/actions'
import { acquireLockFile, type HeldLock } from '../lock-file.ts'
import { spawnAnvil } from './anvil-process.ts'
import { disperseArtifact, testUsdcArtifact } from './contracts/artifacts.ts'
import { type DevAccount, devAccount } from './dev-accounts.ts'
import { ChainError } from './errors.ts'

export type { DevAccount } from './dev-accounts.ts'

export interface DevChainOptions {
  /** Default 31337, anvil's own. */
  chainId?: number
  port?: number
  payers: number
  /** USDC base units minted to each payer. */
  payerFunding: bigint
  /** USDC base units minted to the treasury, so refunds and payouts work from the first minute. */
  treasuryFunding?: bigint
  /** Interval mining; default automine (a block per transaction, at once). */
  blockTimeSeconds?: number
  /** Keep the chain in this file across restarts (locked to one process); default a fresh chain each time. */
  stateFile?: string
}

export interface DevChain {
  rpcUrl: string
  chainId: number
  usdcAddress: Address
  disperseAddress: Address
  treasury: DevAccount
  payers: DevAccount[]
  pid: number
  /** True when the chain came back from its state file (contracts and balances kept, nothing redeployed). */
  restored: boolean
  stop(): Promise<void>
}

const mintAbi = parseAbi(['function mint(address to, uint256 amount) returns (bool)'])

/**
 * A fresh dev chain reproduces the same transactions, hence the same hashes, as the last one: a database
 * kept across restarts would refuse a new payment as already used. With a state file the chain survives
 * the restart instead, and the file is locked so two processes never run one chain file.
 */
function lockStateFile(stateFile: string | undefined): HeldLock | null {
  if (!stateFile) return null
  mkdirSync(dirname(resolve(stateFile)), { recursive: true })
  return acquireLockFile(`${resolve(stateFile)}.lock`, `the dev chain state ${stateFile}`)
}
const DEFAULT_TREASURY_FUNDING = 1_000_000_000_000n // 1,000,000 USDC

export async function startDevChain(options: DevChainOptions): Promise<DevChain> {
  const chainId = options.chainId ?? 31337
  const treasury = devAccount(0)
  const payers = Array.from({ length: options.payers }, (_, i) => devAccount(i + 1))
  const lock = lockStateFile(options.stateFile)
  let anvil: Awaited<ReturnType<typeof spawnAnvil>>
  try {
    anvil = await spawnAnvil({
      chainId,
      port: options.port,
      // anvil's default is 10 accounts; payers beyond account 9 need their ETH for gas too.
      accounts: Math.max(10, options.payers + 1),
      blockTimeSeconds: options.blockTimeSeconds,
      stateFile: options.stateFile,
    })
  } catch (err) {
    lock?.release()
    throw err
  }
  const stop = async () => {
    try {
      await anvil.stop()
    } finally {
      lock?.release()
    }
  }
  try {
    const chain = defineChain({
      id: chainId,
      name: 'tollgate local',
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [anvil.rpcUrl] } },
    })
    const wallet = createWalletClient({
      chain,
      account: privateKeyToAccount(treasury.privateKey),
      transport: http(anvil.rpcUrl),
      pollingInterval: 50,
    })
    // Fresh chain, known sender: the nonces are 0, 1, 2…, so the contract addresses are known up front and
    // every transaction can be sent without waiting for the one before.
    let nonce = 0
    const usdcAddress = getContractAddress({ from: treasury.address, nonce: BigInt(nonce) })
    // A chain restored from its state file already has them, and its payers' balances: nothing to send.
    const deployed = await getCode(wallet, { address: usdcAddress })
    if (deployed !== undefined && deployed !== '0x') {
      return {
        rpcUrl: anvil.rpcUrl,
        chainId,
        usdcAddress,
        disperseAddress: getContractAddress({ from: treasury.address, nonce: 1n }),
        treasury,
        payers,
        pid: anvil.pid,
        restored: true,
        stop,
      }
    }
    const hashes: Hash[] = [
      await wallet.deployContract({
        abi: testUsdcArtifact.abi,
        bytecode: testUsdcArtifact.bytecode,
        nonce: nonce++,
        gas: 3_000_000n,
      }),
    ]
    const disperseAddress = getContractAddress({ from: treasury.address, nonce: BigInt(nonce) })
    hashes.push(
      await wallet.deployContract({
        abi: disperseArtifact.abi,
        bytecode: disperseArtifact.bytecode,
        nonce: nonce++,
        gas: 1_000_000n,
      }),
    )
    const grants: Array<[Address, bigint]> = [
      [treasury.address, options.treasuryFunding ?? DEFAULT_TREASURY_FUNDING],
      ...payers.map((p): [Address, bigint] => [p.address, options.payerFunding]),
    ]
    for (const [to, amount] of grants) {
      if (amount <= 0n) continue
      hashes.push(
        await wallet.writeContract({
          address: usdcAddress,
          abi: mintAbi,
          functionName: 'mint',
          args: [to, amount],
          nonce: nonce++,
          gas: 100_000n,
        }),
      )
    }
    if (options.blockTimeSeconds) await wallet.request({ method: 'evm_mine' as never })
    for (const hash of hashes) {
      const receipt = await waitForTransactionReceipt(wallet, { hash, timeout: 30_000 })
      if (receipt.status !== 'success') {
        throw new ChainError('TOLLGATE_ANVIL_START_FAILED', `dev chain set-up transaction ${hash} reverted`)
      }
    }
    return {
      rpcUrl: anvil.rpcUrl,
      chainId,
      usdcAddress,
      disperseAddress,
      treasury,
      payers,
      pid: anvil.pid,
      restored: false,
      stop,
    }
  } catch (err) {
    await stop()
    throw err
  }
}
