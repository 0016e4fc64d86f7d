// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @dev The part of Permit2's SignatureTransfer this proxy calls.
interface ISignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// @dev EIP-2612's permit, which settleWithPermit tries before settling.
interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// @title X402UptoPermit2Proxy
/// @notice Our own implementation of the x402 "upto" Permit2 proxy, compatible
/// with x402UptoPermit2Proxy (0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002) as the
/// official x402 EVM npm client and facilitator use it: the same functions, witness
/// type, events and custom errors, so the official facilitator's revert mapping
/// reads our reverts as it reads the real proxy's.
///
/// The payer signs a Permit2 witness transfer for a maximum, with this proxy as
/// the spender. The witness binds the recipient (to), the one facilitator that
/// may settle, and the earliest settlement time. That facilitator then settles
/// any amount up to the maximum, once (the Permit2 nonce).
///
/// The runtime code is meant to be placed at the canonical address with
/// anvil_setCode or a genesis alloc, where no constructor runs. So PERMIT2 is a
/// constant, not an immutable set in a constructor as in the official proxy, and
/// the reentrancy guard lives in transient storage (EIP-1153), which needs no
/// initial value.
///
/// This is test infrastructure for local chains. Never deploy it where its
/// transfers mean something: use the official proxy.
contract X402UptoPermit2Proxy {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    /// @notice Permit2's canonical address, the same on every chain.
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    /// @notice Completes Permit2's PermitWitnessTransferFrom type: the witness
    /// field, then the referenced types in alphabetical order, as EIP-712 wants.
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";

    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    /// @dev Set for the duration of a settle, to refuse reentrant calls (a token
    /// that calls back during transferFrom).
    bool private transient entered;

    event Settled();
    event SettledWithPermit();

    error AmountExceedsPermitted();
    error InvalidDestination();
    error InvalidOwner();
    error InvalidPermit2Address();
    error PaymentTooEarly();
    error Permit2612AmountMismatch();
    error ReentrancyGuardReentrantCall();
    error UnauthorizedFacilitator();

    modifier nonReentrant() {
        if (entered) {
            revert ReentrancyGuardReentrantCall();
        }
        entered = true;
        _;
        entered = false;
    }

    /// @notice Moves amount (at most permit.permitted.amount) of the permitted
    /// token from owner to witness.to, as owner signed. Only witness.facilitator
    /// may call it.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    /// @notice Like settle, after trying the owner's EIP-2612 permit that
    /// approves Permit2 for permit.permitted.amount. A failed EIP-2612 permit is
    /// ignored, as in the official proxy: the approval may exist already, and if
    /// it does not, the transfer fails.
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        if (permit2612.value != permit.permitted.amount) {
            revert Permit2612AmountMismatch();
        }
        try IERC20Permit(permit.permitted.token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {} catch {}
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        // The facilitator is part of what the payer signed: anyone else holding
        // the signature must not choose the amount.
        if (msg.sender != witness.facilitator) {
            revert UnauthorizedFacilitator();
        }
        if (amount > permit.permitted.amount) {
            revert AmountExceedsPermitted();
        }
        if (owner == address(0)) {
            revert InvalidOwner();
        }
        if (witness.to == address(0)) {
            revert InvalidDestination();
        }
        // The upper bound is Permit2's deadline.
        if (block.timestamp < witness.validAfter) {
            revert PaymentTooEarly();
        }
        // Nothing has placed Permit2 on this chain: say so rather than let the
        // call below revert without a reason.
        if (address(PERMIT2).code.length == 0) {
            revert InvalidPermit2Address();
        }
        bytes32 witnessHash =
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        PERMIT2.permitWitnessTransferFrom(
            ISignatureTransfer.PermitTransferFrom({
                permitted: ISignatureTransfer.TokenPermissions({
                    token: permit.permitted.token,
                    amount: permit.permitted.amount
                }),
                nonce: permit.nonce,
                deadline: permit.deadline
            }),
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
