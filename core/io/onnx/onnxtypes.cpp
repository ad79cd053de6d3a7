#include "io/onnx/onnxtypes.h"

#include "ir/sizes.h"

#include <limits>

namespace tapestry::io::onnximport {

std::optional<ir::DType> dtypeFromOnnx(int elemType)
{
    switch (elemType) {
    case ::onnx::TensorProto_DataType_FLOAT:
        return ir::DType::F32;
    case ::onnx::TensorProto_DataType_FLOAT16:
        return ir::DType::F16;
    case ::onnx::TensorProto_DataType_BFLOAT16:
        return ir::DType::BF16;
    case ::onnx::TensorProto_DataType_DOUBLE:
        return ir::DType::F64;
    case ::onnx::TensorProto_DataType_INT64:
        return ir::DType::I64;
    case ::onnx::TensorProto_DataType_INT32:
        return ir::DType::I32;
    case ::onnx::TensorProto_DataType_INT8:
        return ir::DType::I8;
    case ::onnx::TensorProto_DataType_UINT8:
        return ir::DType::U8;
    case ::onnx::TensorProto_DataType_BOOL:
        return ir::DType::Bool;
    default:
        return std::nullopt;
    }
}

std::string onnxTypeName(int elemType)
{
    if (::onnx::TensorProto_DataType_IsValid(elemType))
        return ::onnx::TensorProto_DataType_Name(static_cast<::onnx::TensorProto_DataType>(elemType));
    return "element type " + std::to_string(elemType);
}

ShapeResult concreteShape(const ::onnx::TypeProto &type)
{
    if (!type.has_tensor_type())
        return {{}, "is not a tensor (sequence, map or optional values are not supported)"};
    if (!type.tensor_type().has_shape())
        return {{}, "has no shape"};
    ShapeResult r;
    std::int64_t elements = 1;
    const auto &dims = type.tensor_type().shape().dim();
    for (int i = 0; i < dims.size(); ++i) {
        const auto &d = dims[i];
        if (d.has_dim_param())
            return {{}, "dim " + std::to_string(i) + " is still symbolic ('" + d.dim_param() + "')"};
        if (!d.has_dim_value())
            return {{}, "dim " + std::to_string(i) + " is unknown"};
        if (d.dim_value() < 0)
            return {{}, "dim " + std::to_string(i) + " is negative (" + std::to_string(d.dim_value()) + ")"};
        const auto next = ir::checkedMul(elements, d.dim_value());
        if (!next)
            return {{}, "element count overflows 64 bits"};
        elements = *next;
        r.shape.push_back(d.dim_value());
    }
    return r;
}

} // namespace tapestry::io::onnximport
