// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @dev The EIP-1271 interface a contract owner implements.
interface IERC1271Permit2 {
    function isValidSignature(bytes32 hash, bytes memory signature) external view returns (bytes4 magicValue);
}

/// @title Permit2
/// @notice Our own implementation of the part of Uniswap's Permit2 that x402 uses:
/// SignatureTransfer's single-token permitTransferFrom and
/// permitWitnessTransferFrom, the unordered nonce bitmap, and
/// invalidateUnorderedNonces. The function signatures, structs, EIP-712 hashing,
/// events and custom errors are those of Uniswap's ISignatureTransfer, so a
/// client or facilitator written against the real Permit2 works against this
/// one. The batch forms and AllowanceTransfer are left out: x402 calls neither.
///
/// The runtime code is meant to be placed at Permit2's canonical address,
/// 0x000000000022D473030F116dDEE9F6B43aC78BA3, with anvil_setCode or a genesis
/// alloc, where no constructor runs. So the contract has no constructor, no
/// immutables and no state that must be set up: the EIP-712 domain separator is
/// computed on every call from block.chainid and address(this).
///
/// This is test infrastructure for local chains. Never deploy it where its
/// transfers mean something: use the real Permit2.
contract Permit2 {
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

    // keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)"): Permit2's
    // domain has no version.
    bytes32 private constant DOMAIN_TYPEHASH = 0x8cad95687ba82c2ce50e74f7b754645e5117c3a5bec8151c0726d5857980a866;

    bytes32 private constant NAME_HASH = keccak256("Permit2");

    bytes32 private constant TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");

    bytes32 private constant PERMIT_TRANSFER_FROM_TYPEHASH = keccak256(
        "PermitTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline)"
        "TokenPermissions(address token,uint256 amount)"
    );

    // The witness type string the caller passes completes this prefix: it names
    // the witness field, closes the struct and appends the referenced types.
    string private constant PERMIT_WITNESS_TRANSFER_FROM_TYPE_PREFIX =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";

    // bytes4(keccak256("isValidSignature(bytes32,bytes)"))
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    /// @notice nonceBitmap[owner][wordPos] has bit (nonce & 0xff) set once the
    /// owner's nonce with (nonce >> 8) == wordPos was used or invalidated.
    mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

    error InvalidNonce();
    error SignatureExpired(uint256 signatureDeadline);
    error InvalidAmount(uint256 maxAmount);
    error LengthMismatch();
    error InvalidSignatureLength();
    error InvalidSignature();
    error InvalidSigner();
    error InvalidContractSignature();

    /// @notice The EIP-712 domain separator: name "Permit2", this chain, this
    /// address, no version. Computed each time, since this code runs at an
    /// address it was not deployed to.
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, NAME_HASH, block.chainid, address(this)));
    }

    /// @notice Transfers permit.permitted.token from owner to transferDetails.to,
    /// as owner signed for msg.sender (the spender).
    function permitTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes calldata signature
    ) external {
        bytes32 structHash = keccak256(
            abi.encode(
                PERMIT_TRANSFER_FROM_TYPEHASH, _hashTokenPermissions(permit.permitted), msg.sender, permit.nonce,
                permit.deadline
            )
        );
        _transferFrom(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice Like permitTransferFrom, with a witness the owner also signed.
    /// witness is the EIP-712 hash of the witness struct; witnessTypeString
    /// completes the PermitWitnessTransferFrom type (see the prefix above).
    function permitWitnessTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        bytes32 typeHash = keccak256(abi.encodePacked(PERMIT_WITNESS_TRANSFER_FROM_TYPE_PREFIX, witnessTypeString));
        bytes32 structHash = keccak256(
            abi.encode(
                typeHash, _hashTokenPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline, witness
            )
        );
        _transferFrom(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice Marks the bits of mask in the caller's nonce word wordPos as used,
    /// so permits signed with those nonces can no longer be spent.
    function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external {
        nonceBitmap[msg.sender][wordPos] |= mask;
        emit UnorderedNonceInvalidation(msg.sender, wordPos, mask);
    }

    // Internals.

    /// @dev The checks run in the real Permit2's order (deadline, amount, nonce,
    /// signature), so a permit that fails several reverts with the same error.
    function _transferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 structHash,
        bytes calldata signature
    ) private {
        if (block.timestamp > permit.deadline) {
            revert SignatureExpired(permit.deadline);
        }
        uint256 requestedAmount = transferDetails.requestedAmount;
        if (requestedAmount > permit.permitted.amount) {
            revert InvalidAmount(permit.permitted.amount);
        }
        _useUnorderedNonce(owner, permit.nonce);
        _verify(signature, keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash)), owner);
        _safeTransferFrom(permit.permitted.token, owner, transferDetails.to, requestedAmount);
    }

    function _hashTokenPermissions(TokenPermissions memory permitted) private pure returns (bytes32) {
        return keccak256(abi.encode(TOKEN_PERMISSIONS_TYPEHASH, permitted.token, permitted.amount));
    }

    /// @dev Flips the nonce's bit and reverts if it was already set.
    function _useUnorderedNonce(address owner, uint256 nonce) private {
        uint256 wordPos = nonce >> 8;
        uint256 bit = 1 << (nonce & 0xff);
        uint256 word = nonceBitmap[owner][wordPos];
        if (word & bit != 0) {
            revert InvalidNonce();
        }
        nonceBitmap[owner][wordPos] = word | bit;
    }

    /// @dev An owner with code is asked through EIP-1271. Any other owner must
    /// have signed with ECDSA: 65 bytes r||s||v, or 64 bytes r||vs (EIP-2098).
    function _verify(bytes calldata signature, bytes32 digest, address owner) private view {
        if (owner.code.length > 0) {
            (bool ok, bytes memory result) =
                owner.staticcall(abi.encodeWithSelector(IERC1271Permit2.isValidSignature.selector, digest, signature));
            if (!ok || result.length < 32 || abi.decode(result, (bytes32)) != bytes32(ERC1271_MAGIC_VALUE)) {
                revert InvalidContractSignature();
            }
            return;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            r = bytes32(signature[0:32]);
            s = bytes32(signature[32:64]);
            v = uint8(signature[64]);
        } else if (signature.length == 64) {
            r = bytes32(signature[0:32]);
            bytes32 vs = bytes32(signature[32:64]);
            s = vs & bytes32(0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff);
            v = uint8(uint256(vs) >> 255) + 27;
        } else {
            revert InvalidSignatureLength();
        }
        address signer = ecrecover(digest, v, r, s);
        if (signer == address(0)) {
            revert InvalidSignature();
        }
        if (signer != owner) {
            revert InvalidSigner();
        }
    }

    /// @dev Calls token.transferFrom and accepts either no return data or a
    /// true; anything else, a revert included, becomes TRANSFER_FROM_FAILED, the
    /// reason the real Permit2's transfer library gives. A token address without
    /// code fails too, where the real one would silently succeed.
    function _safeTransferFrom(address token, address from, address to, uint256 amount) private {
        bool ok;
        bytes memory result;
        if (token.code.length > 0) {
            (ok, result) = token.call(abi.encodeWithSignature("transferFrom(address,address,uint256)", from, to, amount));
        }
        require(
            ok && (result.length == 0 || (result.length >= 32 && abi.decode(result, (uint256)) == 1)),
            "TRANSFER_FROM_FAILED"
        );
    }
}
