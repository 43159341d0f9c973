terraform {
  # terraform_data needs Terraform 1.4; every OpenTofu release (1.6+) has it. No provider is
  # required, so the image's provider mirror is empty.
  required_version = ">= 1.5"
}
